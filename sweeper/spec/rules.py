"""A config judged against its space's static rules and constraints (pure; no launch, no Optuna):
the preflight refuses what they forbid, and the search skips it."""

from __future__ import annotations

from typing import Any, Mapping

from sweeper.spec.expr import ExprError, Missing
from sweeper.spec.space import Space

Config = Mapping[str, Any]


def excluded_by_rule(space: Space, config: Config) -> str | None:
    """The reason of the first static rule that forbids this config, if any."""
    for expr, reason in space.parsed_rules():
        try:
            if expr.evaluate(config):
                return reason
        except (Missing, ExprError):
            continue
    return None


def violated_constraints(space: Space, config: Config) -> list[str]:
    """Constraint sources that this config breaks; one that names an inactive parameter is skipped."""
    broken = []
    for expr in space.parsed_constraints():
        try:
            if not expr.evaluate(config):
                broken.append(expr.source)
        except Missing:
            continue
        except ExprError as exc:
            broken.append(f"{expr.source} ({exc})")
    return broken
