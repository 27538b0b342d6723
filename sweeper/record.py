"""How a trial outcome becomes Optuna data: the objective value, the constraint keys and the
user attrs. Pure: the study layer does the writing."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from sweeper.config import Space
from sweeper.trial import TrialOutcome

# The same constraint keys on every trial (Optuna 5 counts a trial without constraints as
# feasible). A value > 0 means violated.
CONSTRAINT_KEYS = ("config_fault",)
LOG_TAIL_CHARS = 4000


def objective_value(space: Space, outcome: TrialOutcome) -> float:
    """The objective at its level; a finite pessimistic value when there is none, so a failure
    can never win (its constraint marks it infeasible as well)."""
    metrics = outcome.levels.get(space.objective_level)
    if outcome.failure is None and metrics and metrics.get("valid"):
        value = metrics.get(space.objective.metric)
        if value is not None and math.isfinite(value):
            return float(value)
    return worst_value(space)


def worst_value(space: Space) -> float:
    return 0.0 if space.objective.direction == "maximize" else 1e12


def constraint_values(outcome: TrialOutcome) -> dict[str, float]:
    return {"config_fault": 1.0 if outcome.failure is not None else 0.0}


def outcome_attrs(outcome: TrialOutcome) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "launched": outcome.launched,
        "levels": {str(level): metrics for level, metrics in outcome.levels.items()},
        "stage_seconds": outcome.stage_seconds,
        "output_text": outcome.output_text,
    }
    if outcome.failure:
        failure = asdict(outcome.failure)
        failure["log_tail"] = failure["log_tail"][-LOG_TAIL_CHARS:]
        attrs["failure"] = failure
    return attrs
