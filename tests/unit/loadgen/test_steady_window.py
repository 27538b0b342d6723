"""The steady-state window of a closed-loop level (precision.py): ramp-up and drain left out, the
first C requests staggered so that equal requests do not move in synchronized waves."""

from __future__ import annotations

import numpy as np

from sweeper.loadgen.client import RequestSample, StreamOptions
from sweeper.loadgen.ladder import LoadPlan, staggered
from sweeper.loadgen.precision import PrecisionStop, ramp_end, steady_estimate


def sample(start: float, step_s: float, tokens: int, prefill_s: float) -> RequestSample:
    times = [start + prefill_s + step_s * (i + 1) for i in range(tokens)]
    return RequestSample(ok=True, error="", start=start, ttft=times[0] - start, chunk_times=times,
                         chunk_tokens=[1] * tokens, end=times[-1], prompt_tokens=8, output_tokens=tokens,
                         streamed_tokens=tokens, usage_reported=True, requested_output_tokens=tokens)


def burst_waves(concurrency: int, rounds: int, tokens: int, step_s: float, prefill_s: float,
                slow_first: float = 1.0) -> list[RequestSample]:
    """A closed loop whose C equal requests all start at once: each round is a prefill pause, then
    C tokens a step (a synchronized wave), then the next round; the first round `slow_first` times
    slower (a JIT compile)."""
    out, t = [], 0.0
    for r in range(rounds):
        scale = slow_first if r == 0 else 1.0
        out += [sample(t, step_s * scale, tokens, prefill_s * scale) for _ in range(concurrency)]
        t = out[-1].end
    return out


def test_the_ramp_ends_when_the_last_of_the_first_c_requests_ends():
    first = [sample(0.0, 0.01, n, 0.0) for n in (4, 8, 12, 16)]  # staggered first requests
    later = [sample(s.end, 0.01, 16, 0.0) for s in first]
    assert ramp_end(first[:3] + later[:1], 4) is None  # the longest first request has not ended
    assert ramp_end(first + later, 4) == max(s.end for s in first)
    burst = burst_waves(4, 3, 16, 0.01, 0.05)
    assert ramp_end(burst, 4) == burst[3].end  # a burst's ramp is its first round


def test_staggered_first_requests_spread_their_lengths_over_the_level_s_length():
    plan = LoadPlan(output_len=64, options=StreamOptions())
    first = staggered(plan, [[1, 2]] * 8 + [{"prompt": [3], "max_tokens": 32}])
    assert [p["max_tokens"] for p in first[:8]] == [7, 14, 21, 28, 36, 43, 50, 57]
    assert first[8]["max_tokens"] == 32 and first[0]["prompt"] == [1, 2]  # a request's own length is kept


def test_the_window_without_ramp_and_drain_measures_the_steady_rate_where_the_whole_run_does_not():
    """Synchronized waves with a slow first round (a JIT compile) and a drain: the whole run's rate
    is off; the window from the ramp's end to the stop, MSER-truncated, is within 2%."""
    c, tokens, step, prefill = 16, 32, 0.01, 0.04
    samples = burst_waves(c, 40, tokens, step, prefill, slow_first=3.0)
    rounds_s = tokens * step + prefill
    true_rate = c * tokens / rounds_s
    stop = samples[-1].start  # the last send: what follows is the drain
    times = [t for s in samples for t in s.chunk_times]
    tokens_ = [n for s in samples for n in s.chunk_tokens]
    est = steady_estimate(times, tokens_, [s.latency for s in samples], ramp_end(samples, c), stop)
    whole = sum(s.output_tokens for s in samples[:3 * c]) / samples[3 * c - 1].end  # the old 3-round level
    assert abs(est.value - true_rate) / true_rate < 0.02
    assert abs(whole - true_rate) / true_rate > 0.2


def test_the_stop_rule_waits_for_the_ramp_before_it_judges(monkeypatch):
    from sweeper.loadgen import precision
    monkeypatch.setattr(precision, "JUDGE_EVERY_S", 0.0)
    first = [sample(100.0, 0.01, n, 0.0) for n in (4, 8, 12, 16)]
    rule = PrecisionStop(0.5, concurrency=4, max_seconds=None, max_requests=None)
    later = sample(first[0].end, 0.01, 16, 0.0)  # worker 1's second request
    assert not rule(first[:3] + [later], 100.0, 5, 100.0)
    assert rule.ramp_end is None and rule.estimate is None  # the longest first request is still out
    seconds = [sample(s.end, 0.01, 16, 0.0) for s in first[1:]]
    rule(first + [later] + seconds, 100.0, 8, 100.0)
    assert rule.ramp_end == first[3].end and np.isfinite(rule.ramp_end)
