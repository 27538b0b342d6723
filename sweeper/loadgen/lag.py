"""Event-loop lag: how late the client's own loop runs, measured while it drives a level.

A chunk's arrival is the kernel's receive stamp (sockio.py), so a busy loop does not move it; but
every request is sent by a callback of one event loop, and when that loop is busy (too many
streams for one core, a slow JSON decode) the next request of a closed loop goes out late: the
server idles, fewer requests are in flight than asked, and the client, not the server, sets the
pace. (Over https, chunks are stamped by the loop too.) A ticker task sleeps TICK_S at a time and
records how much later than asked it woke up (its oversleep): that is the delay any other
callback waiting at the same moment saw.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

TICK_S = 0.005


@dataclass(frozen=True)
class LagStats:
    """Oversleep of the ticker, in milliseconds."""

    ticks: int
    median_ms: float
    p99_ms: float
    max_ms: float


def lag_stats(oversleeps_s: list[float]) -> LagStats:
    """Pure summary of oversleep samples (seconds) in ms; zeros when there are none.
    Standard library only: this module also runs on the host (loadgen/onhost.py)."""
    if not oversleeps_s:
        return LagStats(0, 0.0, 0.0, 0.0)
    values = sorted(v * 1000.0 for v in oversleeps_s)
    return LagStats(
        ticks=len(values),
        median_ms=_percentile(values, 50),
        p99_ms=_percentile(values, 99),
        max_ms=values[-1],
    )


def _percentile(ordered: list[float], q: float) -> float:
    """numpy.percentile's default (linear interpolation between closest ranks) of sorted values."""
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class LoopLagMonitor:
    """`async with LoopLagMonitor() as lag: ...` then `lag.stats()`."""

    def __init__(self, tick_s: float = TICK_S) -> None:
        self.tick_s = tick_s
        self.oversleeps_s: list[float] = []
        self._task: asyncio.Task | None = None

    async def __aenter__(self) -> LoopLagMonitor:
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _tick(self) -> None:
        while True:
            asked = time.perf_counter() + self.tick_s
            await asyncio.sleep(self.tick_s)
            self.oversleeps_s.append(max(time.perf_counter() - asked, 0.0))

    def stats(self) -> LagStats:
        return lag_stats(self.oversleeps_s)
