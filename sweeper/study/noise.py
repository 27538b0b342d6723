"""A study's noise floor: how much a config's measured value moves between fresh launches and
between repeats inside one launch, and what that says about where to spend the next GPU minute.

- variance_components: one-way random effects by the method of moments (Searle, Casella and
  McCulloch 1992, ch. 3), the launches as groups, each with its in-launch repeats; several
  configs are pooled on values relative to each config's mean (the spread of a real server is
  about proportional to its speed). scipy has no random-effects estimator and statsmodels'
  MixedLM (REML) is a dependency this needs for two sums of squares.
- best_repeats: in-launch repeats per launch that buy the most precision per GPU second (the
  optimum of a two-stage design, Cochran 1977 §10.6: m* = sqrt(c_launch s_w^2 / (c_repeat s_b^2))).
On vLLM 0.24 on the H200 the between-launch part was the larger one: the same config measured
21-23k tok/s on launches that compiled afresh and 15-18k on launches that loaded the compile cache
(bench/gpu/README.md, "Where the variance comes from"), while repeats inside one launch moved 2-8%.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

NOISE_FLOOR_ATTR = "noise_floor"  # the study's user attr (results/ shows it beside the winner)


@dataclass(frozen=True)
class NoiseFloor:
    """Between- and within-launch CVs of a level's value (relative), from `launches` launches of
    at least `repeats` in-launch repeats each (None where the data cannot tell)."""

    between_cv: float | None
    within_cv: float | None
    launches: int
    repeats: int
    level: str = ""

    @property
    def launch_cv(self) -> float | None:
        """The CV of one launch's value (the mean of `repeats` repeats)."""
        if self.between_cv is None or self.within_cv is None:
            return None
        return math.sqrt(self.between_cv ** 2 + self.within_cv ** 2 / max(self.repeats, 1))

    def as_attr(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Components:
    mean: float
    between_cv: float
    within_cv: float

    @property
    def total_cv(self) -> float:
        """The CV of one run on a fresh launch."""
        return math.sqrt(self.between_cv ** 2 + self.within_cv ** 2)


def variance_components(launches: Sequence[Sequence[float]]) -> Components:
    """Between- and within-launch CVs of one config's runs, grouped by launch (two runs or more in
    at least two launches)."""
    values = [v for launch in launches for v in launch]
    mean = sum(values) / len(values)
    floor = pooled_noise({"": [[v / mean for v in launch] for launch in launches]})
    return Components(mean, floor.between_cv or 0.0, floor.within_cv or 0.0)


def pooled_noise(configs: Mapping[str, Sequence[Sequence[float]]], level: str = "") -> NoiseFloor:
    """The noise floor of several configs' launches (label -> launches -> in-launch repeats), each
    config's values taken relative to its own mean. Between-launch variance needs two launches of
    one config; within-launch variance needs a launch with two repeats."""
    groups: list[list[float]] = []
    labels = 0
    for launches in configs.values():
        launches = [list(v) for v in launches if v]
        if not launches:
            continue
        mean = sum(v for launch in launches for v in launch) / sum(map(len, launches))
        if mean == 0:
            continue
        groups += [[v / mean for v in launch] for launch in launches]
        labels += 1
    n = sum(map(len, groups))
    k = len(groups)
    if not groups:
        return NoiseFloor(None, None, 0, 0, level)
    means = [sum(g) / len(g) for g in groups]
    ss_within = sum((v - m) ** 2 for g, m in zip(groups, means) for v in g)
    within = ss_within / (n - k) if n > k else None
    # each config's relative values average 1: its launches' means spread around 1
    ss_between = sum(len(g) * (m - 1.0) ** 2 for g, m in zip(groups, means))
    between = None
    if k > labels:
        ms_between = ss_between / (k - labels)
        n0 = (n - sum(len(g) ** 2 for g in groups) / n) / (k - 1) if k > 1 else 1.0
        between = max(0.0, (ms_between - (within or 0.0)) / max(n0, 1.0))
    return NoiseFloor(None if between is None else math.sqrt(between),
                      None if within is None else math.sqrt(within), k, min(map(len, groups)), level)


def best_repeats(floor: NoiseFloor, launch_s: float, repeat_s: float, most: int) -> int:
    """In-launch repeats per launch for the next launches: m* = sqrt(c_launch s_w^2 / (c_repeat
    s_b^2)), in [1, most]; `most` where launches do not differ (s_b = 0), 1 where the data cannot
    tell yet."""
    if floor.between_cv is None or floor.within_cv is None or repeat_s <= 0:
        return 1
    if floor.between_cv == 0:
        return most
    m = math.sqrt(launch_s * floor.within_cv ** 2 / (repeat_s * floor.between_cv ** 2))
    return int(min(max(round(m), 1), most))
