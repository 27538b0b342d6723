"""What a study stored about itself, read back (the one reader of a study's own attrs): the search
space (parsed again from its stored text, so every default is there), the reference output, the
trials rejected against it, and the objective."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import optuna

from sweeper.levels import Level, Rate, goal_name, is_rate, stored_workload_levels
from sweeper.outcomes import CAPACITY_METRIC
from sweeper.spec.space import Space
from sweeper.spec.space_file import parse_space, resolve_workload_paths
from sweeper.errors import ConfigError


def parse_stored_space(attrs: Mapping[str, Any]) -> Space:
    """The space a study was created with, from its attrs (ConfigError when it no longer parses);
    its workload's dataset and tokenizer paths taken from the space file's folder, as at creation."""
    space = parse_space(attrs["space_text"], f"{attrs.get('space_path', '?')} (copy stored in the study)")
    path = attrs.get("space_path")
    return resolve_workload_paths(space, Path(path).parent) if path else space


def stored_space(study: optuna.Study) -> Space | None:
    """The space the study was created with; None when the study holds none that still parses."""
    if not study.user_attrs.get("space_text"):
        return None
    try:
        return parse_stored_space(study.user_attrs)
    except ConfigError:
        return None


def study_space(study: optuna.Study) -> dict:
    """The stored space as plain data (readable even when it no longer parses)."""
    return study.user_attrs.get("space", {})


def reference_text(study: optuna.Study) -> str | None:
    """The reference output's first text (what reports show; None until one is settled)."""
    return study.user_attrs.get("reference_text")


def output_rejected(study: optuna.Study) -> dict[str, str] | None:
    """Trial number -> why its outputs disagree with a reference settled after it was measured."""
    return study.user_attrs.get("output_rejected")


@dataclass(frozen=True)
class ObjectiveSpec:
    metric: str
    level: Level
    maximize: bool

    @property
    def name(self) -> str:
        return self.metric if self.metric == CAPACITY_METRIC else goal_name(self.metric, self.level)


def objective_specs(study: optuna.Study) -> list[ObjectiveSpec]:
    """What the study optimises, in the order of its values: one spec, or the Pareto pair
    (throughput, latency)."""
    space = stored_space(study)
    if space is not None:
        return [ObjectiveSpec(g.metric, g.level, g.direction == "maximize") for g in space.goals]
    stored = study_space(study)  # a copy that no longer parses: read what we can
    objective = stored.get("objective", {})
    levels = stored_workload_levels(stored.get("workload", {})) or [1]
    level = objective.get("level")
    at = max(levels) if level is None else Rate(level) if is_rate(levels[0]) else int(level)
    return [ObjectiveSpec(objective.get("metric", "output_throughput"), at,
                          study.directions[0] == optuna.study.StudyDirection.MAXIMIZE)]


def objective_spec(study: optuna.Study, level: Level | None = None) -> ObjectiveSpec:
    """The study's (first) objective metric and direction, at `level` (default: its own level)."""
    first = objective_specs(study)[0]
    return ObjectiveSpec(first.metric, first.level if level is None else level, first.maximize)


def finds_capacity(study: optuna.Study) -> bool:
    """The study's objective is the SLO capacity (max_load_within_slo): each trial searched its load axis."""
    return objective_specs(study)[0].metric == CAPACITY_METRIC


def kernel_groups(study: optuna.Study, trial: int) -> dict[str, float] | None:
    """{kernel group: share of GPU time} of the trial's stored profile (`sweeper profile` keeps it as
    `profile:<trial>`); a study's `kernel_profile` (set by hand) when the trial has none."""
    stored = study.user_attrs.get(f"profile:{trial}")
    if stored and stored.get("groups"):
        return dict(stored["groups"])
    return study.user_attrs.get("kernel_profile")
