"""Which trials count: launched evaluations, feasibility (recorded constraints, failures, the study's
reference output), the Pareto front and the best trial, read from storage alone. The search and the
reports both judge trials with these."""

from __future__ import annotations

from typing import Mapping

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from sweeper.errors import UserError
from sweeper.search.pareto import front_keys
from sweeper.study.stored import output_rejected, reference_text



def is_evaluation(trial: FrozenTrial) -> bool:
    """A finished trial that launched a server (what a budget counts; duplicates are free)."""
    return (trial.state in (TrialState.COMPLETE, TrialState.PRUNED) and bool(trial.user_attrs.get("launched"))
            and "duplicate_of" not in trial.user_attrs)



def infeasible_reason(trial: FrozenTrial, reference: str | None, rejected: Mapping[str, str] | None = None) -> str | None:
    """Why a finished trial cannot rank (None when it can). `rejected`: the study's
    `output_rejected` (trial number -> why its outputs disagree with the reference settled after it)."""
    attrs = trial.user_attrs
    if trial.state != TrialState.COMPLETE:
        return trial.state.name.lower()
    if "duplicate_of" in attrs:
        return f"duplicate of {attrs['duplicate_of']}"
    if failure := attrs.get("failure"):
        return f"{failure['stage']}/{failure['kind']}"
    if any(v > 0 for v in (trial.constraints or {}).values()):
        return "constraint"
    if rejected and str(trial.number) in rejected:
        return "check_output/bad_output"  # measured before the reference was settled, then judged
    if (reference is not None and attrs.get("output_samples") is None
            and attrs.get("output_text") not in (None, reference)):
        return "check_output/bad_output"  # a study from before the tolerant gate: exact text
    return None



def is_feasible(trial: FrozenTrial, reference: str | None, rejected: Mapping[str, str] | None = None) -> bool:
    return infeasible_reason(trial, reference, rejected) is None and trial.values is not None



def is_pareto_study(study: optuna.Study) -> bool:
    """A study of the two-objective mode (throughput up, latency down)."""
    return len(study.directions) > 1



def feasible_trials(study: optuna.Study) -> list[FrozenTrial]:
    reference, rejected = reference_text(study), output_rejected(study)
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if is_feasible(t, reference, rejected)]



def pareto_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The Pareto front of the feasible trials (duplicates and failures never on it), best first
    on the first objective, then trial number."""
    maximize = [d == StudyDirection.MAXIMIZE for d in study.directions]
    by_number = {t.number: t for t in feasible_trials(study)}
    front = [by_number[n] for n in front_keys({n: t.values for n, t in by_number.items()}, maximize)]
    sign = -1 if maximize[0] else 1
    return sorted(front, key=lambda t: (sign * t.values[0], t.number))



def ranked_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The feasible trials best first (ties by trial number); in the Pareto mode the front only,
    by its first objective: the finalists `validate` re-runs."""
    if is_pareto_study(study):
        return pareto_trials(study)
    sign = -1 if study.direction == StudyDirection.MAXIMIZE else 1
    return sorted(feasible_trials(study), key=lambda t: (sign * t.value, t.number))


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    """The best feasible trial; in the Pareto mode the front's best on the first objective
    (throughput): the front's other members trade it for latency."""
    feasible = feasible_trials(study)
    if not feasible:
        return None
    if is_pareto_study(study):
        return pareto_trials(study)[0]
    maximize = study.direction == StudyDirection.MAXIMIZE
    return (max if maximize else min)(feasible, key=lambda t: t.value)



def chosen_trial(study: optuna.Study, number: int) -> FrozenTrial:
    """A feasible trial picked by number (a front member for the Pareto mode's `best --trial`)."""
    for trial in feasible_trials(study):
        if trial.number == number:
            return trial
    raise UserError(f"--trial {number}: not a feasible trial of study {study.study_name!r}")
