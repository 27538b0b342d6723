"""What a study stored about itself, read back: the search space (parsed again from its stored
text, so every default is there) and the objective."""

from __future__ import annotations

from dataclasses import dataclass

import optuna

from sweeper.config import Space, parse_space
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


def objective_spec(study: optuna.Study, level: int | None = None) -> ObjectiveSpec:
    """The study's objective metric and direction, at `level` (default: the objective's level)."""
    space = study.user_attrs.get("space", {})
    objective = space.get("objective", {})
    levels = space.get("workload", {}).get("concurrency") or [1]
    chosen = level or objective.get("level") or max(levels)
    return ObjectiveSpec(objective.get("metric", "output_throughput"), int(chosen),
                         study.direction == optuna.study.StudyDirection.MAXIMIZE)
