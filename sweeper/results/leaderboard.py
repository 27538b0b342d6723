"""The leaderboard, rebuilt from storage alone: one row per trial, feasibility derived from the
recorded constraints and the study's reference output. Duplicates and failures never rank."""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

import optuna
import pandas as pd
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial

from sweeper.levels import (Level, format_number, is_rate, level_key, metric_column, parse_level_key,
                            stored_workload_levels)
from sweeper.loadgen.capacity import capacity_found
from sweeper.study.stored import finds_capacity, output_rejected, reference_text, study_space
from sweeper.study.trials import infeasible_reason, is_pareto_study, pareto_trials


# Per-level columns: (column suffix, metric key in the level's metrics)
LEVEL_COLUMNS = (
    ("output_tok_s", "output_throughput"),
    ("ttft_p50_ms", "median_ttft_ms"),
    ("ttft_p99_ms", "p99_ttft_ms"),
    ("itl_p50_ms", "median_itl_ms"),
    ("itl_p99_ms", "p99_itl_ms"),
    ("output_tok_s_per_gpu", "output_throughput_per_gpu"),
    ("output_tok_s_per_user", "output_throughput_per_user"),
    ("power_w", "power_w_mean"),
    ("energy_j_per_tok", "energy_j_per_output_token"),
    ("valid", "valid"),
)
# ...and an open-loop level's (workload.request_rates): the rate it achieved
RATE_LEVEL_COLUMNS = (("achieved_req_s", "achieved_request_rate"),)


def parameter_names(study: optuna.Study) -> list[str]:
    """Sampled, then derived parameters."""
    space = study_space(study)
    return list(space.get("parameters", {})) + list(space.get("derived", {}))


def study_levels(study: optuna.Study) -> list[Level]:
    """The levels the study's results show: its ladder (its concurrencies, or its request rates:
    open loop); in a capacity study (max_load_within_slo) the search picks the loads, so every
    load its trials measured, all trials' together, lowest first."""
    if not finds_capacity(study):
        return stored_workload_levels(study_space(study).get("workload", {}))
    return sorted({parse_level_key(key) for trial in study.get_trials(deepcopy=False)
                   for key in trial.user_attrs.get("levels", {})})


def capacity_columns(record: Mapping[str, Any] | None) -> dict[str, Any]:
    """A capacity study's columns of a trial: the load its search found (also where the trial does
    not rank), whether the SLO still held at the ceiling, and the lowest load above it that broke it."""
    record = record or {}
    found, failing = capacity_found(record), record.get("first_failing")
    return {"capacity": math.nan if found is None else found, "capacity_capped": record.get("capped", ""),
            "capacity_first_failing": math.nan if failing is None else failing}


def format_values(study: optuna.Study, trial: FrozenTrial) -> str:
    """'metric@cN = value' for each of the trial's objectives."""
    names = study.metric_names or [f"objective {i + 1}" for i in range(len(trial.values))]
    return ", ".join(f"{name} = {value:.2f}" for name, value in zip(names, trial.values))


def format_capacity(row: Mapping[str, Any]) -> str:
    """A row's found capacity (capacity_columns) in a table cell: '12 (SLO broke at 13)',
    '16 (held at the ceiling)'; '-' where the trial's search recorded none."""
    found, capped, failing = (row.get(k) for k in ("capacity", "capacity_capped", "capacity_first_failing"))
    if found is None or pd.isna(found):
        return "-"
    if capped is not None and capped != "" and bool(capped):
        return f"{format_number(found)} (held at the ceiling)"
    if failing is None or pd.isna(failing):
        return format_number(found)
    return f"{format_number(found)} (SLO broke at {format_number(failing)})"


def trial_row(trial: FrozenTrial, params: list[str], levels: list[Level], reference: str | None,
              rejected: Mapping[str, str] | None = None, on_front: bool | None = None,
              capacity: bool = False) -> dict[str, Any]:
    """`capacity`: the study finds capacity (capacity_columns)."""
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
    if capacity:
        row.update(capacity_columns(attrs.get("capacity")))
    level_metrics = attrs.get("levels", {})
    for level in levels:
        metrics = level_metrics.get(level_key(level), {})
        for suffix, key in LEVEL_COLUMNS + (RATE_LEVEL_COLUMNS if is_rate(level) else ()):
            row[metric_column(level, suffix)] = metrics.get(key, math.nan if suffix != "valid" else "")
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
    reference = reference_text(study)
    params, levels = parameter_names(study), study_levels(study)
    pareto = is_pareto_study(study)
    front = {t.number for t in pareto_trials(study)} if pareto else set()
    rejected, capacity = output_rejected(study), finds_capacity(study)
    rows = [trial_row(t, params, levels, reference, rejected, (t.number in front) if pareto else None, capacity)
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
