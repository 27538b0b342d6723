"""SLO capacity: the highest load (concurrency, or request rate) at which a p99 TTFT / TPOT SLO
holds, found by doubling from a start load until the SLO fails (or a ceiling is reached), then
bisecting between the last load that held and the first that failed, down to a resolution.

Pure: the caller hands in `measure(load) -> level metrics` (a real ladder level in `sweeper load
--find-capacity` and in a sweep trial; a deterministic function in the tests). Each load is
measured once. The search assumes latency grows with load; a noisy level at the boundary can flip,
so the answer is defined by what was measured: the SLO held at `capacity` and failed at the
nearest failing load above it, which lies within one resolution step (docs/commands.md "SLO capacity").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

MAX_HALVINGS = 8  # a rate search whose start already breaks the SLO tries start/2 .. start/256


@dataclass(frozen=True)
class CapacitySlo:
    p99_ttft_ms: float | None = None
    p99_tpot_ms: float | None = None

    def __post_init__(self) -> None:
        if self.p99_ttft_ms is None and self.p99_tpot_ms is None:
            raise ValueError("a capacity search needs an SLO: p99_ttft_ms, p99_tpot_ms or both")

    def broken_by(self, metrics: Mapping[str, Any]) -> list[str]:
        """Why a level does not hold the SLO (empty: it holds). A level with a failed request or
        without the latency never holds. The level's other validity rules (loadgen/metrics.py) are
        recorded beside the verdict, not part of it: a client that lagged only raised the latency
        (the verdict errs low), and a client that kept fewer than C in flight (its turnaround on a
        busy machine, the drain at the end) offered a little less load than C."""
        failed = metrics.get("failed") or 0
        reasons = [f"{failed} request(s) failed"] if failed else []
        for name, limit in (("p99_ttft_ms", self.p99_ttft_ms), ("p99_tpot_ms", self.p99_tpot_ms)):
            value = metrics.get(name)
            if limit is None:
                continue
            if value is None or not math.isfinite(value):
                reasons.append(f"no {name}")
            elif value > limit:
                reasons.append(f"{name} {value:.1f} > {limit:g}")
        return reasons


@dataclass(frozen=True)
class CapacitySearch:
    """What to search: the SLO to hold, the highest load to try and how finely to find it (a rate,
    relative, when `rate`; else a concurrency); a rate search's requests in flight at most (0: no cap)."""

    slo: CapacitySlo
    ceiling: float
    resolution: float
    rate: bool = False
    cap: int = 0


@dataclass(frozen=True)
class LevelTried:
    load: float
    holds: bool
    reasons: list[str]
    metrics: Mapping[str, Any]


@dataclass
class Capacity:
    """The search's answer: `capacity` (0 when even the lowest load tried breaks the SLO),
    `capped` when the SLO still held at the ceiling (the true capacity may be higher), and every
    level in the order it was measured."""

    capacity: float
    capped: bool
    levels: list[LevelTried] = field(default_factory=list)

    @property
    def first_failing(self) -> float | None:
        """The lowest load tried that broke the SLO above the capacity (None: none, capped)."""
        above = [t.load for t in self.levels if not t.holds and t.load > self.capacity]
        return min(above) if above else None


def find_capacity(measure: Callable[[float], Mapping[str, Any]], slo: CapacitySlo, *, start: float = 1,
                  ceiling: float = 256, resolution: float = 1, relative: bool = False,
                  integer: bool = True) -> Capacity:
    """Doubling from `start` to the first load that breaks the SLO (or `ceiling`), then bisection
    until the failing and holding loads are within `resolution` (a fraction of the holding load
    when `relative`, as for a rate). `integer`: loads are whole numbers (concurrency). A start that
    already fails: a concurrency search answers 0 (when start is 1) or bisects down from it; a rate
    search halves down first."""
    if start <= 0 or ceiling < start or resolution <= 0:
        raise ValueError(f"need 0 < start <= ceiling and resolution > 0 (start {start}, ceiling {ceiling}, "
                         f"resolution {resolution})")
    tried: dict[float, LevelTried] = {}

    def holds(load: float) -> bool:
        if load not in tried:
            metrics = measure(int(load) if integer else load)
            reasons = slo.broken_by(metrics)
            tried[load] = LevelTried(load, not reasons, reasons, metrics)
        return tried[load].holds

    def result(capacity: float, capped: bool = False) -> Capacity:
        return Capacity(capacity, capped, list(tried.values()))

    low, high = _bracket(holds, start, ceiling, integer)
    if low is None and high is None:
        return result(ceiling, capped=True)
    if low is None:
        if integer:
            low = 0  # concurrency: bisect between 0 (nothing) and the failing start
        else:
            return result(0.0)  # even start / 2**MAX_HALVINGS breaks it
    while not _close_enough(low, high, resolution, relative):
        middle = (low + high) // 2 if integer else (low + high) / 2
        if middle in (low, high):
            break
        if holds(middle):
            low = middle
        else:
            high = middle
    return result(low)


def _bracket(holds: Callable[[float], bool], start: float, ceiling: float, integer: bool
             ) -> tuple[float | None, float | None]:
    """(the last load that held, the first that failed) from doubling; (None, None) when even the
    ceiling holds; (None, failing) when the start fails and, for a rate, halving found none."""
    if not holds(start):
        if integer:
            return None, start
        load = start
        for _ in range(MAX_HALVINGS):
            failing, load = load, load / 2
            if holds(load):
                return load, failing
        return None, load
    low = start
    while low < ceiling:
        load = min(low * 2, ceiling)
        if not holds(load):
            return low, load
        low = load
    return None, None


def _close_enough(low: float, high: float, resolution: float, relative: bool) -> bool:
    step = resolution * low if relative else resolution
    return high - low <= step


def capacity_record(found: Capacity, axis: str, slo: CapacitySlo, level_record: Callable[[Mapping], dict]
                    ) -> dict:
    """The JSON of a search (`sweeper load --find-capacity --json`, a trial's `capacity` attr):
    `capacity_concurrency` or `capacity_rate`, and each level tried in order with its verdict."""
    key = "capacity_concurrency" if axis == "concurrency" else "capacity_rate"
    capacity = int(found.capacity) if axis == "concurrency" else found.capacity
    return {key: capacity, "capped": found.capped, "first_failing": found.first_failing,
            "slo": {"p99_ttft_ms": slo.p99_ttft_ms, "p99_tpot_ms": slo.p99_tpot_ms},
            "levels": [{"load": t.load, "slo_holds": t.holds, "slo_broken_by": t.reasons, **level_record(t.metrics)}
                       for t in found.levels]}


def capacity_found(record: Mapping[str, Any] | None) -> float | None:
    """A search record's answer (capacity_record): its concurrency, or its rate; None without one."""
    if not record:
        return None
    return record.get("capacity_concurrency", record.get("capacity_rate"))
