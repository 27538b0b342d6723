"""Precision-driven levels: the steady-state output tok/s of a closed loop with its 95% CI, and
the rule that ends a level once that CI is narrow enough (or a cap is hit).

Method (docs/measurement.md "Precision-driven levels"):
- The series: output tokens per time window, each counted when its chunk arrived (not at the
  request's end: a closed loop's requests end in waves, and counts of whole requests per window
  jump between 0 and C), in windows of a fifth of the median request latency, from the level's
  start to the moment it stopped sending (the drain after that, with fewer requests in flight, is
  left out). While the level runs only windows before the earliest send still in flight are used:
  all their tokens are in completed requests.
- Ramp-up: a closed loop's first C requests (its ramp) are left out of the window: it starts when
  the last of them ended (ramp_end). A run that starts with staggered lengths (ladder.py's
  `ramp: stagger`: request i of the first C asks for (i+1)/C of the output length) leaves its
  workers' phases spread evenly over one request, so from there on requests end and start a few at
  a time instead of in synchronized waves of C (on vLLM at C=128 a wave of 128 equal requests made
  a level's value depend on how each wave split: bench/gpu/README.md, "Where the variance
  comes from").
- Warm-up: MSER-5 (White 1997): the windows are grouped by 5 (one MSER batch is about one round
  of the closed loop) and the prefix of d batches that minimises the MSER statistic
  sum((z_j - mean)^2 over the rest) / (rest)^2 is dropped, searched over d <= half the batches.
  It drops the slow first batches (a JIT compile, a graph capture, a cold cache) without a fixed
  warm-up count, and keeps everything when nothing was slow.
- Batch means: the n steady MSER batches are regrouped into B = n // ceil(n / MAX_BATCHES) equal,
  non-overlapping batches (all n up to 30, then 15-30; a remainder shorter than one batch at the
  start is dropped too); their means are close
  to independent when each spans at least a round, which is what makes the CI valid for an
  autocorrelated closed loop where per-request numbers are not. CI: mean +- t(0.975, B-1) s/sqrt(B)
  (scipy.stats.t). At least MIN_BATCHES batches are needed before a level can be called precise.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

WINDOWS_PER_ROUND = 5  # raw windows per median request latency: one MSER-5 batch ~ one round
MSER_BATCH = 5
MIN_BATCHES = 10
MAX_BATCHES = 30  # Schmeiser (1982): 10-30 batches; more buys little CI width and costs validity
CONFIDENCE = 0.95
# The stop rule is judged at most this often (wall s): each judgement (~1-2 ms on a busy core) sits
# in one worker's gap before its next send, and judged after every completion at C=1 it took 9% of
# the achieved concurrency (a `client turnaround` invalid level in the tiny sim sweep).
JUDGE_EVERY_S = 0.25


@dataclass(frozen=True)
class SteadyEstimate:
    """Steady-state output tok/s (modelled seconds) with its CI; NaN where there is too little."""

    value: float
    ci_low: float
    ci_high: float
    batches: int
    warmup_dropped_s: float
    window_s: float = 0.0  # the steady window the batches span (modelled s)

    @property
    def relative_half_width(self) -> float:
        if not (math.isfinite(self.ci_high) and self.value > 0):
            return math.inf
        return (self.ci_high - self.ci_low) / 2 / self.value

    def precise(self, precision: float) -> bool:
        return self.batches >= MIN_BATCHES and self.relative_half_width <= precision


def window_series(times: Sequence[float], tokens: Sequence[float], start: float, stop: float,
                  width: float) -> np.ndarray:
    """Tokens arrived in each whole window of `width` from start to stop."""
    n = int((stop - start) // width) if width > 0 else 0
    if n <= 0:
        return np.zeros(0)
    edges = start + width * np.arange(n + 1)
    counts, _ = np.histogram(np.asarray(times, dtype=float), bins=edges, weights=np.asarray(tokens, dtype=float))
    return counts


def mser_truncation(series: Sequence[float]) -> int:
    """How many leading points MSER drops: the d (at most half of them) minimising
    sum((x_i - mean(x[d:]))^2 for i >= d) / (n - d)^2."""
    x = np.asarray(series, dtype=float)
    n = x.size
    if n < 4:
        return 0
    # suffix sums give every d's statistic in one pass
    rest = np.arange(n, 0, -1, dtype=float)
    s1 = np.cumsum(x[::-1])[::-1]
    s2 = np.cumsum((x * x)[::-1])[::-1]
    stat = (s2 - s1 * s1 / rest) / (rest * rest)
    return int(np.argmin(stat[: n // 2 + 1]))


def batch_means_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """Mean of the batch means and its two-sided t interval; the bounds NaN below two batches."""
    from scipy import stats  # lazily: CLI start-up time

    x = np.asarray(values, dtype=float)
    mean = float(np.mean(x)) if x.size else math.nan
    if x.size < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + confidence / 2, x.size - 1)) * float(np.std(x, ddof=1)) / math.sqrt(x.size)
    return mean, mean - half, mean + half


def ramp_end(samples: Sequence, concurrency: int) -> float | None:
    """When a closed loop's ramp ended: the end of the last of its first `concurrency` requests
    (each worker's first; they are the requests sent before the first one ended). None until all
    of them ended (samples: the completed ones, in any order)."""
    if not samples:
        return None
    first_end = min(s.end for s in samples)
    ramp = [s.end for s in samples if s.start < first_end]
    return max(ramp) if len(ramp) >= concurrency else None


def steady_estimate(times: Sequence[float], tokens: Sequence[float], latencies: Sequence[float],
                    start: float, stop: float, time_scale: float = 1.0) -> SteadyEstimate:
    """The steady-state estimate of a closed-loop run's output tok/s from its token arrivals
    (times, tokens) between start (the ramp's end) and stop (the drain's start), wall times in,
    modelled tok/s out (a simulator's clock runs time_scale times slower)."""
    if not latencies:
        return SteadyEstimate(math.nan, math.nan, math.nan, 0, 0.0)
    width = float(np.median(latencies)) / WINDOWS_PER_ROUND
    windows = window_series(times, tokens, start, stop, width)
    groups = windows.size // MSER_BATCH
    if groups == 0:
        return SteadyEstimate(math.nan, math.nan, math.nan, 0, 0.0)
    mser = windows[: groups * MSER_BATCH].reshape(groups, MSER_BATCH).sum(axis=1)
    dropped = mser_truncation(mser)
    steady = mser[dropped:]
    size = -(-steady.size // MAX_BATCHES)  # ceil: at most MAX_BATCHES batches, whole MSER batches each
    count = steady.size // size
    skip = steady.size - count * size  # the remainder (< one batch) goes with the warm-up
    batches = steady[skip:].reshape(count, size).sum(axis=1) / (size * MSER_BATCH * width / time_scale)
    mean, low, high = batch_means_ci(batches)
    warmup_s = (dropped + skip) * MSER_BATCH * width / time_scale
    return SteadyEstimate(mean, low, high, count, warmup_s, count * size * MSER_BATCH * width / time_scale)


def estimate_of_run(samples: Sequence, start: float, stop: float, time_scale: float = 1.0) -> SteadyEstimate:
    """steady_estimate over a run's completed samples (RequestSample) from `start` (the ramp's
    end) to `stop`."""
    done = [s for s in samples if s.ok]
    times = [t for s in done for t in s.chunk_times]
    tokens = [n for s in done for n in s.chunk_tokens]
    return steady_estimate(times, tokens, [s.latency for s in done], start, stop, time_scale)


class PrecisionStop:
    """The closed loop's stop condition (client.run_closed_loop's `until`): true once the CI is
    within `precision`, or max_seconds (modelled) has passed, or max_requests were sent. Judged
    at most once per round of `concurrency` completions and JUDGE_EVERY_S (it costs the event loop
    a numpy pass)."""

    def __init__(self, precision: float | None, concurrency: int, max_seconds: float | None,
                 max_requests: int | None, time_scale: float = 1.0) -> None:
        from scipy import stats  # noqa: F401  imported before the loop starts, not inside it

        self.precision, self.concurrency, self.time_scale = precision, concurrency, time_scale
        self.max_seconds, self.max_requests = max_seconds, max_requests
        self.reason = ""
        self.estimate: SteadyEstimate | None = None  # the last one judged
        self._judged_at = 0
        self._judged_when = 0.0
        self.ramp_end: float | None = None  # wall s; known once the ramp's requests all ended
        # the arrivals so far, grown by the samples completed since the last judgement (the
        # samples list only grows): flattening them all each time cost ~15 ms at 1,000 requests
        self._times: list[float] = []
        self._tokens: list[int] = []
        self._latencies: list[float] = []

    def __call__(self, samples: Sequence, start: float, sent: int, settled: float) -> bool:
        now = time.perf_counter()
        elapsed = (now - start) / self.time_scale
        if self.max_seconds is not None and elapsed >= self.max_seconds:
            self.reason = "max_seconds"
        elif self.max_requests is not None and sent >= self.max_requests:
            self.reason = "max_requests"
        elif (self.precision is not None and len(samples) - self._judged_at >= self.concurrency
              and now - self._judged_when >= JUDGE_EVERY_S):
            self._judged_when = now
            for sample in samples[self._judged_at:]:
                if sample.ok:
                    self._times.extend(sample.chunk_times)
                    self._tokens.extend(sample.chunk_tokens)
                    self._latencies.append(sample.latency)
            self._judged_at = len(samples)
            if self.ramp_end is None:
                self.ramp_end = ramp_end(samples, self.concurrency)
            if self.ramp_end is not None:
                self.estimate = steady_estimate(self._times, self._tokens, self._latencies,
                                                max(start, self.ramp_end), settled, self.time_scale)
                if self.estimate.precise(self.precision):
                    self.reason = "precision"
        return bool(self.reason)
