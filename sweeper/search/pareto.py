"""The two-objective (Pareto) mode's pure pieces: dominance, the front, and early abandon by
dominance. A config is on the front when no other feasible config is at least as good on both
objectives and better on one."""

from __future__ import annotations

from typing import Hashable, Sequence, TypeVar

from sweeper.spec.space import Space
from sweeper.outcomes import FailureKind, Stage
from sweeper.trial.context import Failure

K = TypeVar("K", bound=Hashable)


def dominates(a: Sequence[float], b: Sequence[float], maximize: Sequence[bool]) -> bool:
    """a is at least as good as b on every objective and strictly better on one."""
    better = False
    for x, y, up in zip(a, b, maximize):
        if (x < y) if up else (x > y):
            return False
        better = better or x != y
    return better


def front_keys(points: dict[K, Sequence[float]], maximize: Sequence[bool]) -> list[K]:
    """The keys of the non-dominated points, in the order given. Equal points are all kept (none
    dominates another); callers drop duplicates of one config before."""
    return [key for key, values in points.items()
            if not any(dominates(other, values, maximize) for o, other in points.items() if o != key)]


def dominated_verdict(space: Space, measured: dict[int, dict],
                      front: Sequence[tuple[int, float, float]]) -> Failure | None:
    """Early abandon in the Pareto mode: stop the ladder when the latency objective is measured and
    even a linear extrapolation of throughput to its level stays below `search.abandon_below` of a
    feasible config whose latency is no worse. `front`: (trial, throughput, latency) of feasible
    trials."""
    fraction = space.search.abandon_below
    throughput, latency = space.goals
    if fraction <= 0 or not front or not measured or throughput.level in measured or latency.level not in measured:
        return None
    last = max(measured)
    here, at_latency = measured[last], measured[latency.level]
    if not (here.get("valid") and at_latency.get("valid")) or last >= throughput.level:
        return None
    mine = at_latency.get(latency.metric)
    optimistic = float(here.get(throughput.metric) or 0.0) * throughput.level / last
    if mine is None:
        return None
    for trial, their_throughput, their_latency in front:
        if their_latency <= mine and optimistic < fraction * their_throughput:
            return Failure(Stage.LOAD, FailureKind.ABANDONED, (
                f"at most {optimistic:.2f} {throughput.name} (linear bound), below {fraction:.0%} of trial "
                f"{trial}'s {their_throughput:.2f}, whose {latency.name} {their_latency:.2f} is no worse "
                f"than {float(mine):.2f}: dominated"))
    return None
