"""How a trial outcome becomes Optuna data: the objective value, the constraint keys and the
user attrs. Pure: the study layer does the writing."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from sweeper.loadgen.capacity import capacity_found
from sweeper.levels import Level, describe_level, level_key
from sweeper.spec.space import Space
from sweeper.trial.context import Failure, TrialOutcome
from sweeper.outcomes import FailureKind, Stage

# The same constraint keys on every trial (Optuna 5 counts a trial without constraints as
# feasible). A value > 0 means violated.
LOG_TAIL_CHARS = 4000


def objective_values(space: Space, outcome: TrialOutcome) -> list[float]:
    """Each goal's metric at its level (one goal, or the Pareto pair); a finite pessimistic value
    when there is none, so a failure can never win (its constraint marks it infeasible as well)."""
    values = []
    if space.finds_capacity:  # the search's answer; 0 (never a winner) without one
        found = capacity_found(outcome.capacity) if outcome.failure is None else None
        return [float(found) if found is not None else worst_value("maximize")]
    for goal in space.goals:
        metrics = outcome.levels.get(goal.level)
        value = metrics.get(goal.metric) if outcome.failure is None and metrics and metrics.get("valid") else None
        ok = value is not None and math.isfinite(value)
        values.append(float(value) if ok else worst_value(goal.direction))
    return values


def objective_value(space: Space, outcome: TrialOutcome) -> float:
    """The single objective (the first goal in the Pareto mode)."""
    return objective_values(space, outcome)[0]


def worst_value(direction: str) -> float:
    return 0.0 if direction == "maximize" else 1e12


def constraint_values(outcome: TrialOutcome, space: Space) -> dict[str, float]:
    """config_fault: the config failed (crash, garbage, rule...); slo: by how much (relative) the
    worst SLO was exceeded at a measured level up to the objective level."""
    fault = outcome.failure is not None and outcome.failure.kind not in (FailureKind.SLO, FailureKind.ABANDONED)
    if space.finds_capacity:  # the SLO is what the search measures against: broken only at C = 1
        # (a rate search: at the lowest rate it tried, when even that one broke it)
        lowest = min(outcome.levels) if space.workload.open_loop and outcome.levels else 1
        slo = slo_excess(space, {lowest: outcome.levels[lowest]}) if lowest in outcome.levels else 0.0
        return {"config_fault": 1.0 if fault else 0.0, "slo": slo}
    return {"config_fault": 1.0 if fault else 0.0, "slo": slo_excess(space, outcome.levels)}


def slo_excess(space: Space, levels: dict[Level, dict]) -> float:
    worst = 0.0
    for level, metrics in levels.items():
        if level <= space.objective_level:
            for limit_name, metric_name in _SLO_METRICS.items():
                limit = getattr(space.slo, limit_name)
                value = metrics.get(metric_name)
                if limit is not None and value is not None and math.isfinite(value):
                    worst = max(worst, value / limit - 1.0)
    return worst


_SLO_METRICS = {"p99_ttft_ms": "p99_ttft_ms", "p99_tpot_ms": "p99_tpot_ms"}


def judge_level(space: Space, level: Level, metrics: dict, incumbent: float | None) -> Failure | None:
    """Stop the ladder early: an SLO already broken (latency only grows with the load), or a
    config that cannot reach `search.abandon_below` of the incumbent even if throughput grew
    linearly with the load (concurrency, or request rate) from here (an optimistic bound for a
    batching server; an open loop's throughput is at most its offered load). A capacity search
    judges its own levels against the SLO."""
    if space.finds_capacity:
        return None
    if level <= space.objective_level and slo_excess(space, {level: metrics}) > 0:
        return Failure(Stage.LOAD, FailureKind.SLO, f"SLO broken at {describe_level(level)}")
    if space.is_pareto:
        return None  # no single incumbent: the Pareto mode abandons by dominance (sweeper.pareto)
    fraction = space.search.abandon_below
    metric = space.objective.metric
    if (fraction > 0 and incumbent and metric.endswith("throughput") and level < space.objective_level
            and metrics.get("valid")):
        optimistic = metrics.get(metric, 0.0) * space.objective_level / level
        if optimistic < fraction * incumbent:
            return Failure(Stage.LOAD, FailureKind.ABANDONED, f"at most {optimistic:.2f} at "
                           f"{describe_level(space.objective_level)} (linear bound), below {fraction:.0%} of the best "
                           f"{incumbent:.2f}")
    return None


def outcome_attrs(outcome: TrialOutcome) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "launched": outcome.launched,
        "levels": {level_key(level): metrics for level, metrics in outcome.levels.items()},
        "stage_seconds": outcome.stage_seconds,
        "output_text": outcome.output_text,
        "output_samples": outcome.output_samples,
    }
    if outcome.capacity is not None:
        attrs["capacity"] = outcome.capacity
    if outcome.gpu_memory is not None:
        attrs["gpu_memory"] = outcome.gpu_memory
    if outcome.failure:
        failure = asdict(outcome.failure)
        failure["log_tail"] = failure["log_tail"][-LOG_TAIL_CHARS:]
        attrs["failure"] = failure
    return attrs
