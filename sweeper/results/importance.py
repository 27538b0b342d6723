"""Parameter importance (optuna.importance.get_param_importances) over the feasible COMPLETE
trials only: failures carry a pessimistic value that would teach nothing about speed."""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Iterator

import optuna
from optuna.trial import FrozenTrial, TrialState

from sweeper.study.trials import is_feasible
from sweeper.study.stored import output_rejected, reference_text

MIN_TRIALS = 4


@contextmanager
def _quiet_optuna() -> Iterator[None]:
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        optuna.logging.set_verbosity(level)


def feasible_complete_trials(study: optuna.Study) -> list[FrozenTrial]:
    reference = reference_text(study)
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if is_feasible(t, reference, output_rejected(study))]


def build_param_importances(study: optuna.Study) -> tuple[dict[str, float], str]:
    """(importance by parameter, largest first; a note). Empty with the reason in the note when
    there are too few trials or nothing varies."""
    trials = feasible_complete_trials(study)
    if len(trials) < MIN_TRIALS:
        return {}, (f"needs at least {MIN_TRIALS} feasible completed trials; this study has "
                    f"{len(trials)}")
    common = set.intersection(*(set(t.params) for t in trials))
    varied = sorted(p for p in common if len({repr(t.params[p]) for t in trials}) > 1)
    if not varied:
        return {}, "no parameter took more than one value among the feasible trials"
    if len({t.values[0] for t in trials}) < 2:
        return {}, "every feasible trial has the same objective value"
    pareto = len(study.directions) > 1
    with _quiet_optuna():
        scratch = optuna.create_study(directions=study.directions)
        scratch.add_trials(trials)
        try:  # the Pareto mode: importance for the first objective (throughput)
            importances = optuna.importance.get_param_importances(
                scratch, params=varied, target=(lambda t: t.values[0]) if pareto else None)
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:
            return {}, f"optuna could not compute importances: {exc}"
    first = f" for {(study.metric_names or ['the first objective'])[0]}" if pareto else ""
    return dict(importances), (f"over {len(trials)} feasible completed trials{first} "
                               f"({', '.join(varied)} varied)")
