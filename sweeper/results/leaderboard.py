"""The leaderboard, rebuilt from storage alone: one row per trial, feasibility derived from the
recorded constraints and the study's reference output. Duplicates and failures never rank."""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

import optuna
import pandas as pd
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from sweeper.errors import UserError
from sweeper.pareto import front_keys

# Per-level columns: (column suffix, metric key in the level's metrics)
LEVEL_COLUMNS = (
    ("output_tok_s", "output_throughput"),
    ("ttft_p50_ms", "median_ttft_ms"),
    ("ttft_p99_ms", "p99_ttft_ms"),
    ("itl_p50_ms", "median_itl_ms"),
    ("itl_p99_ms", "p99_itl_ms"),
    ("valid", "valid"),
)


def study_space(study: optuna.Study) -> dict:
    return study.user_attrs.get("space", {})


def parameter_names(study: optuna.Study) -> list[str]:
    """Sampled, then derived parameters."""
    space = study_space(study)
    return list(space.get("parameters", {})) + list(space.get("derived", {}))


def concurrency_levels(study: optuna.Study) -> list[int]:
    return list(study_space(study).get("workload", {}).get("concurrency", []))


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
    reference, rejected = study.user_attrs.get("reference_text"), study.user_attrs.get("output_rejected")
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


def format_values(study: optuna.Study, trial: FrozenTrial) -> str:
    """'metric@cN = value' for each of the trial's objectives."""
    names = study.metric_names or [f"objective {i + 1}" for i in range(len(trial.values))]
    return ", ".join(f"{name} = {value:.2f}" for name, value in zip(names, trial.values))


def trial_row(trial: FrozenTrial, params: list[str], levels: list[int], reference: str | None,
              rejected: Mapping[str, str] | None = None, on_front: bool | None = None) -> dict[str, Any]:
    attrs = trial.user_attrs
    reason = infeasible_reason(trial, reference, rejected)
    failure = attrs.get("failure") or {}
    kind = failure.get("kind") or ("bad_output" if reason == "check_output/bad_output" else "")
    row: dict[str, Any] = {
        "trial": trial.number,
        "state": trial.state.name,
        "feasible": reason is None,
        "failure_stage": failure.get("stage") or ("check_output" if kind else ""),
        "failure_kind": kind,
        "duplicate_of": attrs.get("duplicate_of", ""),
        "seed": attrs.get("seed", ""),
        "retry_of": attrs.get("retry_of", ""),
    }
    config = {**trial.params, **json.loads(attrs.get("config_key") or "{}")}  # with derived values
    for name in params:
        row[f"param_{name}"] = config.get(name, "")
    values = trial.values if trial.values is not None and reason is None else None
    row["objective"] = values[0] if values else math.nan
    if on_front is not None:  # the Pareto mode: the second objective, and whether it is on the front
        row["objective_2"] = values[1] if values else math.nan
        row["on_front"] = on_front
    level_metrics = attrs.get("levels", {})
    for level in levels:
        metrics = level_metrics.get(str(level), {})
        for suffix, key in LEVEL_COLUMNS:
            row[f"c{level}_{suffix}"] = metrics.get(key, math.nan if suffix != "valid" else "")
    row["duration_s"] = (trial.datetime_complete - trial.datetime_start).total_seconds() \
        if trial.datetime_complete and trial.datetime_start else math.nan
    row["host"] = attrs.get("host", "")
    serving = (attrs.get("gpu_memory") or {}).get("serving")  # recorded when the GPU gate is on
    row["gpu_serving_mib"] = sum(serving.values()) if serving else math.nan
    return row


def leaderboard_frame(study: optuna.Study) -> pd.DataFrame:
    """Every trial, one row each, best feasible first, then the rest by trial number. In the
    Pareto mode the front comes first (by the first objective), then the dominated feasible
    trials, then the rest."""
    reference = study.user_attrs.get("reference_text")
    params, levels = parameter_names(study), concurrency_levels(study)
    pareto = is_pareto_study(study)
    front = {t.number for t in pareto_trials(study)} if pareto else set()
    rejected = study.user_attrs.get("output_rejected")
    rows = [trial_row(t, params, levels, reference, rejected, (t.number in front) if pareto else None)
            for t in study.get_trials(deepcopy=False)]
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    ascending = study.directions[0] != StudyDirection.MAXIMIZE
    frame["_rank_key"] = frame["objective"] if ascending else -frame["objective"]
    frame["_front"] = frame["on_front"] if pareto else False
    frame = frame.sort_values(["feasible", "_front", "_rank_key", "trial"], ascending=[False, False, True, True],
                              na_position="last")
    return frame.drop(columns=["_rank_key", "_front"]).reset_index(drop=True)
