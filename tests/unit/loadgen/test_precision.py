"""Batch means and MSER-5 on synthetic series with a known mean: the 95% CI of an autocorrelated
(AR(1)) series covers the true mean about 95% of the time, where the naive i.i.d. interval over
the same points does not; a slow warm-up prefix is dropped; the stop rule's caps hold."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np
from scipy import stats

from sweeper.loadgen import precision
from sweeper.loadgen.client import LevelRun, RequestSample, StreamOptions
from sweeper.loadgen.ladder import LoadPlan, summarize_run
from sweeper.loadgen.lag import LagStats
from sweeper.loadgen.precision import (MIN_BATCHES, MSER_BATCH, WINDOWS_PER_ROUND, PrecisionStop, SteadyEstimate,
                                       batch_means_ci, mser_truncation, steady_estimate, window_series)

MEAN = 100.0


def ar1(n: int, phi: float, rng: np.random.Generator, sd: float = 10.0) -> np.ndarray:
    """A stationary AR(1) series around MEAN (lag-1 correlation phi)."""
    from scipy.signal import lfilter

    noise = rng.normal(0.0, sd * math.sqrt(1 - phi * phi), n)
    noise[0] = rng.normal(0.0, sd)  # started in its stationary distribution
    return MEAN + lfilter([1.0], [1.0, -phi], noise)


def batch_ci(series: np.ndarray, batches: int = 30) -> tuple[float, float, float]:
    size = series.size // batches
    return batch_means_ci(series[: batches * size].reshape(batches, size).mean(axis=1))


def test_batch_means_ci_covers_the_mean_of_an_autocorrelated_series():
    rng = np.random.default_rng(1)
    trials, covered, naive_covered = 400, 0, 0
    for _ in range(trials):
        x = ar1(3000, 0.9, rng)
        _, low, high = batch_ci(x)
        covered += low <= MEAN <= high
        half = stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
        naive_covered += abs(x.mean() - MEAN) <= half
    assert 0.92 <= covered / trials <= 0.98, covered / trials
    assert naive_covered / trials < 0.6  # what ignoring the autocorrelation would claim


def test_batch_means_ci_is_a_t_interval():
    mean, low, high = batch_means_ci([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert math.isclose(high - mean, stats.t.ppf(0.975, 2) * 1.0 / math.sqrt(3))
    assert math.isnan(batch_means_ci([5.0])[1])


def test_mser_drops_a_slow_warm_up_and_keeps_a_steady_series():
    rng = np.random.default_rng(2)
    steady = ar1(200, 0.3, rng, sd=3.0)
    assert mser_truncation(steady) <= 10
    warm = np.concatenate([np.linspace(20.0, 90.0, 15), steady])  # a JIT / capture-slow start
    dropped = mser_truncation(warm)
    assert 13 <= dropped <= 25
    assert mser_truncation(warm) <= warm.size // 2


def test_window_series_counts_tokens_by_arrival():
    series = window_series([0.05, 0.15, 0.16, 0.95, 1.2], [1, 2, 3, 4, 5], start=0.0, stop=1.0, width=0.25)
    assert list(series) == [6, 0, 0, 4]  # the arrival after stop is left out


def streamed(start: float, latency: float, tokens: int, rate_scale: float = 1.0) -> RequestSample:
    times = [start + latency * (i + 1) / tokens * rate_scale for i in range(tokens)]
    return RequestSample(ok=True, error="", start=start, ttft=times[0] - start, chunk_times=times,
                         chunk_tokens=[1] * tokens, end=times[-1], prompt_tokens=8, output_tokens=tokens,
                         streamed_tokens=tokens, usage_reported=True, requested_output_tokens=tokens)


def closed_loop(rounds: int, concurrency: int, latency: float, tokens: int, slow_rounds: int = 0,
                jitter: float = 0.02, seed: int = 3) -> list[RequestSample]:
    """A closed loop's samples: each worker sends again at once; the first slow_rounds take 3x longer."""
    rng = np.random.default_rng(seed)
    samples = []
    for worker in range(concurrency):
        t = 0.0
        for r in range(rounds):
            lat = latency * (3.0 if r < slow_rounds else 1.0) * (1 + rng.uniform(-jitter, jitter))
            samples.append(streamed(t, lat, tokens))
            t += lat
    return samples


def estimate(samples: list[RequestSample], stop: float, time_scale: float = 1.0) -> SteadyEstimate:
    times = [t for s in samples for t in s.chunk_times]
    tokens = [n for s in samples for n in s.chunk_tokens]
    return steady_estimate(times, tokens, [s.latency for s in samples], 0.0, stop, time_scale)


def test_steady_estimate_of_a_closed_loop_drops_its_slow_start():
    samples = closed_loop(rounds=40, concurrency=4, latency=1.0, tokens=20, slow_rounds=3)
    stop = 45.0  # 3 slow rounds (9 s), then 37 of 1 s: before the last ones end
    est = estimate(samples, stop)
    true_rate = 4 * 20 / 1.0
    assert est.ci_low <= true_rate <= est.ci_high
    assert abs(est.value - true_rate) / true_rate < 0.02
    assert 6.0 <= est.warmup_dropped_s <= 14.0  # 3 rounds of 3 s each were slow
    assert est.batches >= MIN_BATCHES and est.precise(0.02)
    whole = sum(s.output_tokens for s in samples if s.end <= stop) / stop
    assert whole < 0.95 * true_rate  # the whole-run rate is what the warm-up spoils


def test_steady_estimate_is_in_modelled_seconds():
    samples = closed_loop(rounds=30, concurrency=2, latency=0.02, tokens=10)
    assert math.isclose(estimate(samples, 0.55, time_scale=0.02).value, estimate(samples, 0.55).value * 0.02,
                        rel_tol=1e-9)


def test_too_little_data_is_never_precise():
    samples = closed_loop(rounds=3, concurrency=2, latency=1.0, tokens=10)
    est = estimate(samples, 3.0)
    assert est.batches < MIN_BATCHES and not est.precise(0.5)
    assert (MSER_BATCH, WINDOWS_PER_ROUND) == (5, 5)  # one MSER batch is about one round


def test_stop_rule_caps():
    now = time.perf_counter()
    by_requests = PrecisionStop(0.01, concurrency=2, max_seconds=None, max_requests=10)
    assert not by_requests([], now, 9, now) and by_requests([], now, 10, now)
    assert by_requests.reason == "max_requests"
    by_time = PrecisionStop(0.01, concurrency=2, max_seconds=0.5, max_requests=None, time_scale=0.01)
    assert by_time([], now - 0.006, 1, now) and by_time.reason == "max_seconds"  # 0.6 modelled s


def test_stop_rule_stops_once_precise(monkeypatch):
    monkeypatch.setattr(precision, "JUDGE_EVERY_S", 0.0)  # judged at every round here: no clock
    samples = closed_loop(rounds=40, concurrency=4, latency=0.01, tokens=20)
    rule = PrecisionStop(0.02, concurrency=4, max_seconds=None, max_requests=None)
    start = time.perf_counter()
    shifted = [streamed(start + s.start, s.latency, s.output_tokens) for s in sorted(samples, key=lambda s: s.end)]
    stopped_after = None
    for n in range(1, len(shifted) + 1):
        settled = min((s.start for s in shifted[n:]), default=shifted[n - 1].end)
        if rule(shifted[:n], start, n + 4, settled):
            stopped_after = n
            break
    assert stopped_after is not None and stopped_after < len(shifted) and rule.reason == "precision"
    assert rule.estimate is not None and rule.estimate.precise(0.02)


def test_stop_rule_is_judged_at_most_every_judge_interval():
    samples = closed_loop(rounds=40, concurrency=1, latency=0.001, tokens=5)
    rule = PrecisionStop(1e-9, concurrency=1, max_seconds=None, max_requests=None)
    start = time.perf_counter()
    for n in range(1, 41):
        rule(samples[:n], start, n, start)
    assert rule._judged_at == 1  # 40 completions inside one interval: one judgement, not 40


def test_a_precise_levels_latency_percentiles_leave_out_the_warm_up_it_dropped():
    """The slow first rounds (a JIT compile, a graph capture) are cut from the throughput by MSER;
    the same cut applies to the latencies, or one warm-up would set every p99."""
    samples = closed_loop(rounds=40, concurrency=4, latency=1.0, tokens=20, slow_rounds=3)
    stop = 45.0
    run = LevelRun([s for s in samples if s.start < stop], 0.0, max(s.end for s in samples if s.start < stop),
                   LagStats(10, 0.1, 0.2, 0.3), turnarounds_s=[], stopped_at=stop)
    plan = LoadPlan(concurrency=(4,), input_len=8, output_len=20, options=StreamOptions(), precision=0.02)
    until = PrecisionStop(0.02, concurrency=4, max_seconds=None, max_requests=None)
    level = summarize_run(plan, 4, run, until)
    assert level["precision_reached"] and 6.0 <= level["warmup_dropped_s"] <= 14.0
    assert level["steady_requests"] < level["completed"]
    # steady requests take 1 s end to end (+-2%); the 12 slow ones took 3 s
    assert level["p99_e2e_latency_ms"] < 1100.0 and level["max_concurrent_requests"] == 4
    whole = summarize_run(replace(plan, precision=None), 4, run)
    assert whole["p99_e2e_latency_ms"] > 2500.0  # the fixed-size level's percentiles include them
