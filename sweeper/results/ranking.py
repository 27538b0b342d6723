"""Ranking at any concurrency level: the objective's metric read at level C. Only feasible trials
whose level C is valid rank; duplicates, failures and invalid levels never do."""

from __future__ import annotations

import math

import optuna
import pandas as pd

from sweeper.errors import UserError
from sweeper.outcomes import CAPACITY_METRIC
from sweeper.results.leaderboard import concurrency_levels, leaderboard_frame
from sweeper.search.trials import is_pareto_study
from sweeper.search.stored import ObjectiveSpec, objective_spec


def rank_value(trial_levels: dict, feasible: bool, spec: ObjectiveSpec, capacity: dict | None = None) -> float:
    """The metric a trial ranks by at the spec's level (max_load_within_slo: the capacity its
    search found, `capacity` attr); NaN when it cannot rank there."""
    if spec.metric == CAPACITY_METRIC:
        found = (capacity or {}).get("capacity_concurrency")
        return float(found) if feasible and found is not None else math.nan
    metrics = trial_levels.get(str(spec.level)) or {}
    value = metrics.get(spec.metric)
    if not feasible or metrics.get("valid") is not True or value is None:
        return math.nan
    value = float(value)
    return value if math.isfinite(value) else math.nan


def check_level(study: optuna.Study, level: int | None) -> None:
    levels = concurrency_levels(study)
    if level is not None and level not in levels:
        raise UserError(f"--level {level}: study {study.study_name!r} measured levels "
                        f"{', '.join(map(str, levels)) or 'none'}")


def ranked_frame(study: optuna.Study, level: int | None = None, feasible_only: bool = False) -> pd.DataFrame:
    """The leaderboard with `rank` (1 = best; empty when a trial does not rank), `rank_level` and
    `rank_value`, ranked trials first, then the rest by trial number. In the Pareto mode only
    the front ranks, by its first objective (throughput)."""
    check_level(study, level)
    if is_pareto_study(study):
        return front_ranked_frame(study, level, feasible_only)
    spec = objective_spec(study, level)
    frame = leaderboard_frame(study)
    if frame.empty:
        return frame.assign(rank=pd.Series(dtype="Int64"), rank_level=pd.Series(dtype="int64"),
                            rank_value=pd.Series(dtype="float64"))
    trials = {t.number: t.user_attrs for t in study.get_trials(deepcopy=False)}
    values = [rank_value(trials.get(n, {}).get("levels", {}), bool(f), spec, trials.get(n, {}).get("capacity"))
              for n, f in zip(frame["trial"], frame["feasible"])]
    frame = frame.assign(rank_level=spec.level, rank_value=values)
    key = -frame["rank_value"] if spec.maximize else frame["rank_value"]
    frame = (frame.assign(_key=key).sort_values(["_key", "trial"], na_position="last")
             .drop(columns="_key").reset_index(drop=True))
    ranked = frame["rank_value"].notna()
    frame["rank"] = pd.array([i + 1 if r else None for i, r in enumerate(ranked)], dtype="Int64")
    if feasible_only:
        frame = frame[ranked].reset_index(drop=True)
    return frame


def front_ranked_frame(study: optuna.Study, level: int | None = None, feasible_only: bool = False) -> pd.DataFrame:
    """The Pareto mode's leaderboard: the front first, ranked 1..n by the first objective, each
    with both values (`objective`, `objective_2`); then dominated feasible trials, then the rest."""
    if level is not None:
        raise UserError(f"--level: study {study.study_name!r} has two objectives, each at its own level; "
                        "its Pareto front is not ranked at another level")
    spec = objective_spec(study)
    frame = leaderboard_frame(study)
    if frame.empty:
        return frame.assign(rank=pd.Series(dtype="Int64"), rank_level=pd.Series(dtype="int64"),
                            rank_value=pd.Series(dtype="float64"))
    front = frame["on_front"].astype(bool)
    frame = frame.assign(rank_level=spec.level, rank_value=frame["objective"].where(front))
    frame["rank"] = pd.array([i + 1 if f else None for i, f in enumerate(front)], dtype="Int64")
    if feasible_only:
        frame = frame[front].reset_index(drop=True)
    return frame


def best_ranked_trial(study: optuna.Study, level: int | None = None) -> optuna.trial.FrozenTrial | None:
    """The trial ranked first at `level` (default: the objective's level), or None."""
    frame = ranked_frame(study, level, feasible_only=True)
    if frame.empty:
        return None
    return _trial_by_number(study, int(frame["trial"].iloc[0]))


def _trial_by_number(study: optuna.Study, number: int) -> optuna.trial.FrozenTrial:
    return next(t for t in study.get_trials(deepcopy=False) if t.number == number)
