"""What a study stored about itself, read back: the search space (parsed again from its stored
text, so every default is there) and the objective."""

from __future__ import annotations

from dataclasses import dataclass

import optuna

from sweeper.spec.space import Space, parse_space
from sweeper.errors import ConfigError


def stored_space(study: optuna.Study) -> Space | None:
    """The space the study was created with; None when the study holds none that still parses."""
    attrs = study.user_attrs
    text = attrs.get("space_text")
    if not text:
        return None
    try:
        return parse_space(text, f"{attrs.get('space_path', '?')} (copy stored in the study)")
    except ConfigError:
        return None


@dataclass(frozen=True)
class ObjectiveSpec:
    metric: str
    level: int
    maximize: bool

    @property
    def name(self) -> str:
        return f"{self.metric}@c{self.level}"


def objective_specs(study: optuna.Study) -> list[ObjectiveSpec]:
    """What the study optimises, in the order of its values: one spec, or the Pareto pair
    (throughput, latency)."""
    space = stored_space(study)
    if space is not None:
        return [ObjectiveSpec(g.metric, g.level, g.direction == "maximize") for g in space.goals]
    stored = study.user_attrs.get("space", {})  # a copy that no longer parses: read what we can
    objective = stored.get("objective", {})
    levels = stored.get("workload", {}).get("concurrency") or [1]
    return [ObjectiveSpec(objective.get("metric", "output_throughput"), int(objective.get("level") or max(levels)),
                          study.directions[0] == optuna.study.StudyDirection.MAXIMIZE)]


def objective_spec(study: optuna.Study, level: int | None = None) -> ObjectiveSpec:
    """The study's (first) objective metric and direction, at `level` (default: its own level)."""
    first = objective_specs(study)[0]
    return ObjectiveSpec(first.metric, int(level or first.level), first.maximize)
