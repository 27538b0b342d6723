"""Per-level statistics with SGLang bench_serving's definitions, plus a validity verdict.

Pure functions over RequestSample lists. Only completed requests enter the latency and token
statistics (as in bench_serving); failures make the level invalid instead.

A level is invalid when: no request was sent; any request failed (HTTP error, error event,
dropped connection, timeout, stall); the server sent no usage report (stream_options.include_usage)
so the streamed count cannot be checked; the server's usage count disagrees with the tokens that
streamed in; a request received fewer tokens than requested; the achieved concurrency is below
MIN_CONCURRENCY_FRACTION of the target (closed loop only; named `client turnaround` when the
client's own gaps between a request's end and its next send account for the shortfall); the
measured run's first round met a one-time stall (first_round_stall); or the client's own event loop lagged (p99 oversleep of its ticker above MAX_CLIENT_LAG_P99_MS: the
client, not the server, was then adding latency). The two client reasons are the harness's
faults (spoiled_by_client): the level is measured again, never the config's failure; so is a
concurrency shortfall or a first-round stall in a run whose client lagged. Repeats of a level (combine_repeats) are
flagged `unstable`, not invalid, when the coefficient of variation of their output throughput
exceeds UNSTABLE_CV; a combined level keeps each repeat's reasons (`repeat_invalid_reasons`).

A level whose stream was coarse (more than COARSE_TOKENS_PER_CHUNK tokens per chunk on average,
e.g. `transformers serve` under load) is flagged `coarse_stream` with a note, not made invalid:
its throughput is exact, but TTFT ends at a chunk that may hold several tokens and ITL is each
chunk's gap spread evenly over its tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sweeper.loadgen.client import RequestSample
from sweeper.loadgen.lag import LagStats
from sweeper.outcomes import LevelMetrics
from sweeper.spec.space import MAX_CLIENT_LAG_P99_MS  # the one default

STAT_NAMES = ("mean", "median", "std", "p90", "p95", "p99")
MAX_ERRORS_KEPT = 5
MIN_CONCURRENCY_FRACTION = 0.95
# From bench/capacity.py (bench/README.md): on one core, p99 oversleep stayed at 1.1-1.8 ms while
# tok/s and median ITL held their bounds (to ~19,000 tok/s), and passed 5 ms where TTFT ran 10+ ms
# late (~29,000 tok/s and beyond).
UNSTABLE_CV = 0.05
CLIENT_LAGGED = "client lagged"
# The achieved concurrency fell short, but adding back the time the client itself spent between
# a request's end and its next send reaches the target: the client's turnaround, not the server.
CLIENT_TURNAROUND = "client turnaround"
HARNESS_FAULTS = (CLIENT_LAGGED, CLIENT_TURNAROUND)
CONCURRENCY_SHORTFALL = "achieved concurrency"
FIRST_ROUND_STALL = "the first round waited"
# What the client's own stamps time (its sends, its reads): a lagging client's, not the server's.
CLIENT_TIMED = (CONCURRENCY_SHORTFALL, FIRST_ROUND_STALL)
# A measured run whose first round waited this many times longer for its first token than the
# rounds after it (and at least STALL_MIN_S longer), also per prompt token it prefilled alongside,
# met a one-time stall: a compile or first allocation the warm-up did not reach (vLLM 0.24 on the
# H200: 760 ms against 72-118 ms at C=64).
STALL_FACTOR = 3.0
STALL_MIN_S = 0.25
# ...and at least this much longer in wall seconds: on the time-scaled simulator a hiccup of the
# shared machine (a few ms of wall time) would otherwise read as a modelled stall of 0.25 s.
STALL_MIN_WALL_S = 0.05
COARSE_TOKENS_PER_CHUNK = 1.5


def percentile_summary(values_ms: Sequence[float], name: str) -> dict[str, float]:
    """{mean,median,std,p90,p95,p99}_{name}_ms over values_ms; NaN when there are none."""
    values = np.asarray(values_ms, dtype=float)
    if values.size == 0:
        return {f"{stat}_{name}_ms": math.nan for stat in STAT_NAMES}
    return {
        f"mean_{name}_ms": float(np.mean(values)),
        f"median_{name}_ms": float(np.median(values)),
        f"std_{name}_ms": float(np.std(values)),
        f"p90_{name}_ms": float(np.percentile(values, 90)),
        f"p95_{name}_ms": float(np.percentile(values, 95)),
        f"p99_{name}_ms": float(np.percentile(values, 99)),
    }


def inter_token_latencies_s(sample: RequestSample) -> list[float]:
    """Gap before each chunk after the first, split evenly over the tokens that chunk carried."""
    itls: list[float] = []
    for i in range(1, len(sample.chunk_times)):
        tokens = max(sample.chunk_tokens[i], 1)
        gap = sample.chunk_times[i] - sample.chunk_times[i - 1]
        itls.extend([gap / tokens] * tokens)
    return itls


def time_per_output_token_s(sample: RequestSample) -> float | None:
    """(latency - TTFT) / (output tokens - 1); None with fewer than 2 output tokens."""
    if sample.output_tokens <= 1 or not math.isfinite(sample.ttft):
        return None
    return (sample.latency - sample.ttft) / (sample.output_tokens - 1)


def achieved_concurrency(latencies_s: Sequence[float], duration_s: float) -> float:
    """Mean number of requests in flight: total request-time over wall time."""
    return float(sum(latencies_s)) / duration_s if duration_s > 0 else math.nan


def concurrency_while_sending(samples: Sequence[RequestSample]) -> float:
    """Mean requests in flight from the first send to the last: a closed loop holds exactly C
    there whatever the lengths, while its drain after the last send is as long as the longest
    request left (requests of varied lengths make that tail long). NaN with under two sends."""
    starts = sorted(s.start for s in samples)
    if len(starts) < 2 or starts[-1] <= starts[0]:
        return math.nan
    first, last = starts[0], starts[-1]
    busy = sum(max(0.0, min(s.end, last) - max(s.start, first)) for s in samples)
    return busy / (last - first)


def distinct_errors(samples: Sequence[RequestSample], limit: int = MAX_ERRORS_KEPT) -> list[str]:
    """Up to `limit` distinct error texts of failed samples, in order of first appearance."""
    errors = dict.fromkeys(s.error for s in samples if not s.ok)
    return list(errors)[:limit]


def slo_met(sample: RequestSample, slo_ttft_s: float | None, slo_tpot_s: float | None) -> bool:
    """Whether a completed request met both SLOs (an absent SLO is met); TPOT of a 1-token
    request counts as 0, as in vLLM's goodput."""
    if not sample.ok:
        return False
    if slo_ttft_s is not None and not sample.ttft <= slo_ttft_s:
        return False
    tpot = time_per_output_token_s(sample) or 0.0
    return slo_tpot_s is None or tpot <= slo_tpot_s


def invalid_reasons(
    samples: Sequence[RequestSample],
    concurrency: int | None,
    achieved: float,
    requested_output_len: int | None,
    lag: LagStats | None = None,
    max_client_lag_ms: float = MAX_CLIENT_LAG_P99_MS,
    turnaround_concurrency: float = 0.0,
    first_round_check: bool = True,
    time_scale: float = 1.0,
) -> list[str]:
    """Why a level's numbers cannot be trusted; empty when they can. concurrency=None (open
    loop) skips the concurrency check. turnaround_concurrency: the requests the client's own
    turnaround kept from being in flight (summed gaps over the run's time); when they account for
    a shortfall of achieved concurrency, the reason names the client. first_round_check=False:
    the run's warm-up is cut off later (a precision-driven level), no first-round stall test.
    time_scale: the simulator's wall seconds per modelled second (the stall is judged modelled)."""
    if not samples:
        return ["no requests were sent"]
    completed = [s for s in samples if s.ok]
    stall_judged = first_round_check and concurrency is not None
    reasons = [
        _failures(samples, completed),
        _unreported_usage(completed),
        _usage_mismatch(completed),
        _short_outputs(completed, requested_output_len),
        _concurrency_shortfall(concurrency, achieved, turnaround_concurrency),
        first_round_stall(completed, concurrency, time_scale) if stall_judged else None,
        _client_lag(lag, max_client_lag_ms),
    ]
    return [reason for reason in reasons if reason]


def _failures(samples: Sequence[RequestSample], completed: Sequence[RequestSample]) -> str | None:
    failed = len(samples) - len(completed)
    if not failed:
        return None
    return f"{failed} of {len(samples)} requests failed: {distinct_errors(samples, 1)[0]}"


def _unreported_usage(completed: Sequence[RequestSample]) -> str | None:
    unreported = [s for s in completed if not s.usage_reported]
    if not unreported:
        return None
    return (f"{len(unreported)} requests: the server reported no usage, so the "
            f"{unreported[0].streamed_tokens} tokens counted in the stream cannot be checked")


def _usage_mismatch(completed: Sequence[RequestSample]) -> str | None:
    mismatched = [s for s in completed if s.usage_reported and s.output_tokens != s.streamed_tokens]
    if not mismatched:
        return None
    s = mismatched[0]
    return (f"{len(mismatched)} requests: server usage count disagrees with streamed tokens "
            f"(e.g. usage {s.output_tokens}, streamed {s.streamed_tokens})")


def _short_outputs(completed: Sequence[RequestSample], requested_output_len: int | None) -> str | None:
    short = [s for s in completed if s.output_tokens < _expected_output_len(s, requested_output_len)]
    if not short:
        return None
    s = short[0]
    return (f"{len(short)} requests received fewer tokens than requested "
            f"(e.g. {s.output_tokens} of {_expected_output_len(s, requested_output_len)})")


def _concurrency_shortfall(concurrency: int | None, achieved: float, turnaround_concurrency: float) -> str | None:
    """Fewer in flight than MIN_CONCURRENCY_FRACTION of the target (None: open loop, no target); named the
    client's turnaround when its own gaps account for the shortfall."""
    bar = None if concurrency is None else MIN_CONCURRENCY_FRACTION * concurrency
    if bar is None or achieved >= bar:  # a NaN achieved fails `>=`: a shortfall too
        return None
    client = math.isfinite(achieved) and achieved + turnaround_concurrency >= bar
    return ((f"{CLIENT_TURNAROUND}: " if client else "")
            + f"{CONCURRENCY_SHORTFALL} {achieved:.2f} below {MIN_CONCURRENCY_FRACTION:.0%} of target {concurrency}"
            + (f" (the client's own gaps between a request's end and its next send held "
               f"{turnaround_concurrency:.2f} requests out of flight)" if client else ""))


def _client_lag(lag: LagStats | None, max_client_lag_ms: float) -> str | None:
    if lag is None or not lag.p99_ms > max_client_lag_ms:
        return None
    return (f"{CLIENT_LAGGED}: event-loop p99 lag {lag.p99_ms:.1f} ms above "
            f"{max_client_lag_ms:g} ms (max {lag.max_ms:.1f} ms)")


def spoiled_by_client(metrics: dict) -> bool:
    """Invalid for the client alone, the harness's fault, not the server's: every invalid run of
    the level (each repeat, where it was combined) was the client's (_spoiled_run)."""
    runs = metrics.get("repeat_invalid_reasons") or [metrics.get("invalid_reasons") or []]
    invalid = [reasons for reasons in runs if reasons]
    return bool(invalid) and all(_spoiled_run(reasons) for reasons in invalid)


def _spoiled_run(reasons: Sequence[str]) -> bool:
    """One run's reasons, all the client's: its lag, its turnaround, or, where the client lagged,
    what its own stamps time (CLIENT_TIMED). A closed loop's requests in flight are the client's
    to keep (failed requests aside, which have reasons of their own), and a late loop sends late
    and reads late. The simulator's best config once measured 3.67 of 4 in flight while the client
    lagged 15 ms (p99): recorded as the config's invalid measurement, it scored nothing and the
    campaign named the runner-up. A busy machine's 55-ms hiccup read as a first-round stall while
    the client lagged 28 ms: the only trial of a sweep failed. A real one-time stall (a compile)
    is gone from the retry."""
    lagged = any(r.startswith(CLIENT_LAGGED) for r in reasons)
    return all(r.startswith(HARNESS_FAULTS) or (lagged and r.startswith(CLIENT_TIMED)) for r in reasons)


def first_round_stall(completed: Sequence[RequestSample], concurrency: int, time_scale: float = 1.0) -> str | None:
    """Why the first round's TTFT shows a one-time stall, or None (needs a round after it).

    A closed loop sends its first C requests together, so their prefills queue behind each
    other, while later sends follow their own request's end: staggered, once lengths vary (a
    dataset, drawn lengths, a prefix the cache has not seen). So the first round must also have
    waited STALL_FACTOR times longer per prompt token in prefill alongside it (prefill_contention)
    than the rounds after it: a real stall delays the engine whatever its queue; a first round
    of long prompts sent together waits in proportion to them. With one length for all, later
    rounds are sent together too and both tests agree. Times in modelled seconds (wall / time_scale)."""
    ordered = sorted((s for s in completed if math.isfinite(s.ttft)), key=lambda s: s.start)
    if len(ordered) < 2 * concurrency:
        return None
    ttfts = np.array([s.ttft for s in ordered]) / time_scale
    first, rest = float(np.median(ttfts[:concurrency])), float(np.median(ttfts[concurrency:]))
    if not (first > STALL_FACTOR * rest and first - rest > STALL_MIN_S
            and (first - rest) * time_scale > STALL_MIN_WALL_S):
        return None
    per_token = ttfts / prefill_contention(ordered)
    first_pt, rest_pt = float(np.median(per_token[:concurrency])), float(np.median(per_token[concurrency:]))
    if not first_pt > STALL_FACTOR * rest_pt:
        return None
    return (f"{FIRST_ROUND_STALL} {first * 1000:.0f} ms for its first token against {rest * 1000:.0f} ms "
            f"after it ({first_pt * 1e6:.0f} against {rest_pt * 1e6:.0f} us per prompt token in prefill "
            "alongside it): a one-time stall (a compile, a first allocation) inside the measured run")


def prefill_contention(samples: Sequence[RequestSample]) -> np.ndarray:
    """Per sample, the prompt tokens waiting for a first token while it did (its own included):
    the summed prompt_tokens (at least 1 each) of every sample whose wait, send to first token,
    overlaps its own."""
    starts = np.array([s.start for s in samples])
    firsts = starts + np.array([s.ttft for s in samples])
    tokens = np.array([max(s.prompt_tokens, 1) for s in samples], dtype=float)
    overlaps = (starts[None, :] <= firsts[:, None]) & (firsts[None, :] >= starts[:, None])
    return overlaps @ tokens


def _expected_output_len(sample: RequestSample, requested_output_len: int | None) -> int:
    # None means: hold each request to what it asked for (its requested_output_tokens).
    return sample.requested_output_tokens if requested_output_len is None else requested_output_len


def achieved_arrival_rate(samples: list[RequestSample], time_scale: float = 1.0) -> float | None:
    """Requests per (modelled) second actually sent by an open loop: (n - 1) over the span of
    send times; None with fewer than two requests."""
    starts = sorted(s.start for s in samples)
    if len(starts) < 2 or starts[-1] <= starts[0]:
        return None
    return (len(starts) - 1) / ((starts[-1] - starts[0]) / time_scale)


def summarize_level(
    samples: list[RequestSample],
    concurrency: int | None,
    duration_s: float,
    *,
    time_scale: float = 1.0,
    requested_output_len: int | None = None,
    lag: LagStats | None = None,
    slo_ttft_ms: float | None = None,
    slo_tpot_ms: float | None = None,
    max_client_lag_ms: float = MAX_CLIENT_LAG_P99_MS,
    varied_lengths: bool = False,
    turnarounds_s: Sequence[float] | None = None,
    first_round_check: bool = True,
) -> LevelMetrics:
    """bench_serving-style metrics for one concurrency level, with `valid` and `invalid_reasons`.
    varied_lengths: the requests asked for lengths of their own (a dataset, drawn lengths), so
    the concurrency target is judged while requests were being sent (concurrency_while_sending).

    duration_s is the wall time of the measured run. A simulator runs its clock at
    wall = modelled * time_scale, so every wall duration is divided by time_scale first and the
    result is in modelled seconds. requested_output_len=None checks each request against its own
    requested_output_tokens; pass 0 to skip the length check. concurrency=None: an open-loop run
    (no concurrency target). lag: the client's event-loop lag during the run (wall ms, unscaled).
    request_goodput: completed requests meeting both SLOs (TTFT and TPOT, modelled ms) per
    second, as bench_serving's goodput; None without SLOs. turnarounds_s: the closed loop's gaps
    from a request's end (or the run's start) to the same worker's next send (wall s), the
    client's own turnaround.
    """
    if time_scale <= 0:
        raise ValueError(f"time_scale must be > 0, got {time_scale}")
    completed = [s for s in samples if s.ok]
    dur = duration_s / time_scale
    achieved = achieved_concurrency([s.latency / time_scale for s in completed], dur)
    judged = concurrency_while_sending(samples) if varied_lengths else achieved
    turnaround = achieved_concurrency([t / time_scale for t in turnarounds_s or []], dur)
    reasons = invalid_reasons(samples, concurrency, judged, requested_output_len, lag, max_client_lag_ms,
                              turnaround if math.isfinite(turnaround) else 0.0, first_round_check, time_scale)
    return {
        "duration": dur,
        **_volume_fields(samples, completed, dur),
        "request_goodput": request_goodput(completed, dur, time_scale, slo_ttft_ms, slo_tpot_ms),
        "slo_ttft_ms": slo_ttft_ms,
        "slo_tpot_ms": slo_tpot_ms,
        **latency_fields(completed, time_scale),
        "concurrency": achieved,
        "client_turnaround_concurrency": turnaround if turnarounds_s is not None else None,
        "max_concurrent_requests": concurrency,
        "time_scale": time_scale,
        **_client_lag_fields(lag),
        **stream_granularity(completed),
        "errors": distinct_errors(samples),
        "valid": not reasons,
        "invalid_reasons": reasons,
    }


def _volume_fields(samples: Sequence[RequestSample], completed: Sequence[RequestSample],
                  duration: float) -> dict[str, float]:
    """The requests completed and failed, the tokens in and out, and their rates per (modelled) second."""
    total_input = sum(s.prompt_tokens for s in completed)
    total_output = sum(s.output_tokens for s in completed)
    return {
        "completed": len(completed),
        "failed": len(samples) - len(completed),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "total_streamed_tokens": sum(s.streamed_tokens for s in completed),
        "request_throughput": _per_second(len(completed), duration),
        "input_throughput": _per_second(total_input, duration),
        "output_throughput": _per_second(total_output, duration),
        "total_throughput": _per_second(total_input + total_output, duration),
    }


def _client_lag_fields(lag: LagStats | None) -> dict[str, float | None]:
    """The client's event-loop lag during the run (wall ms); None without a measurement."""
    return {
        "client_lag_median_ms": None if lag is None else lag.median_ms,
        "client_lag_p99_ms": None if lag is None else lag.p99_ms,
        "client_lag_max_ms": None if lag is None else lag.max_ms,
    }


def latency_fields(completed: Sequence[RequestSample], time_scale: float = 1.0) -> dict[str, float | None]:
    """The latency percentiles (TTFT, ITL, TPOT, e2e; modelled ms) and tok/s per user of completed
    requests: the whole run's in summarize_level, the steady state's in a precise level."""
    ttfts = [s.ttft / time_scale for s in completed if math.isfinite(s.ttft)]
    itls = [itl / time_scale for s in completed for itl in inter_token_latencies_s(s)]
    tpots = [t / time_scale for s in completed if (t := time_per_output_token_s(s)) is not None]
    return {
        **percentile_summary(_to_ms(ttfts), "ttft"),
        **percentile_summary(_to_ms(itls), "itl"),
        **percentile_summary(_to_ms(tpots), "tpot"),
        **percentile_summary(_to_ms([s.latency / time_scale for s in completed]), "e2e_latency"),
        "output_throughput_per_user": per_user_throughput(tpots),
    }


def per_user_throughput(tpots_s: Sequence[float]) -> float | None:
    """The tok/s one request sees while it decodes: 1 / its median TPOT (None without any)."""
    median = float(np.median(tpots_s)) if tpots_s else 0.0
    return 1.0 / median if median > 0 else None


def request_goodput(completed: Sequence[RequestSample], duration: float, time_scale: float,
                    slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> float | None:
    """Completed requests meeting both SLOs (modelled ms) per modelled second; None without SLOs."""
    if slo_ttft_ms is None and slo_tpot_ms is None:
        return None
    ttft_s, tpot_s = (None if v is None else v * time_scale / 1000.0 for v in (slo_ttft_ms, slo_tpot_ms))
    return _per_second(sum(slo_met(s, ttft_s, tpot_s) for s in completed), duration)


def stream_granularity(completed: Sequence[RequestSample]) -> dict:
    """How finely the stream arrived: chunks, tokens per chunk, and notes when it was coarse or
    when chunk token counts were estimated from the final usage (client.RequestDialect)."""
    chunks = sum(len(s.chunk_times) for s in completed)
    tokens = sum(s.output_tokens for s in completed)
    per_chunk = tokens / chunks if chunks else math.nan
    estimated = sum(1 for s in completed if s.tokens_estimated)
    coarse = per_chunk > COARSE_TOKENS_PER_CHUNK
    notes = []
    if coarse:
        notes.append(f"coarse stream: {chunks} chunks carried {tokens} tokens ({per_chunk:.1f} per chunk); "
                     "TTFT may include several tokens and ITL spreads each chunk's gap over its tokens")
    if estimated:
        notes.append(f"{estimated} of {len(completed)} requests: tokens per chunk spread from the "
                     "server's final usage count (it reports none per chunk)")
    return {"total_chunks": chunks, "tokens_per_chunk": per_chunk, "coarse_stream": coarse,
            "chunk_tokens_estimated": estimated, "stream_notes": notes}


def _per_second(count: float, duration_s: float) -> float:
    return count / duration_s if duration_s > 0 else math.nan


def _to_ms(values_s: Sequence[float]) -> list[float]:
    return [v * 1000.0 for v in values_s]


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample standard deviation over mean; 0.0 for fewer than two values, NaN for a zero mean."""
    data = np.asarray(values, dtype=float)
    if data.size < 2:
        return 0.0
    mean = float(np.mean(data))
    return float(np.std(data, ddof=1)) / mean if mean else math.nan


def combine_repeats(summaries: Sequence[LevelMetrics]) -> LevelMetrics:
    """One level's summary from its repeats: the median repeat by output throughput (the lower
    middle one for an even count), valid only when every repeat is, with `repeats`,
    `repeat_output_throughputs`, `cv_output_throughput`, `unstable` (CV > UNSTABLE_CV),
    `median_repeat` (its index) and `repeat_invalid_reasons` (each repeat's, which the combined
    `invalid_reasons` prefix with "repeat N: ")."""
    if not summaries:
        raise ValueError("no repeats to combine")
    throughputs = [s["output_throughput"] for s in summaries]
    order = sorted(range(len(summaries)), key=lambda i: _nan_last(throughputs[i]))
    middle = order[(len(order) - 1) // 2]
    reasons = summaries[0]["invalid_reasons"] if len(summaries) == 1 else [
        f"repeat {i + 1}: {reason}" for i, s in enumerate(summaries) for reason in s["invalid_reasons"]
    ]
    cv = coefficient_of_variation(throughputs)
    return {
        **summaries[middle],
        "repeat_invalid_reasons": [list(s["invalid_reasons"]) for s in summaries],
        "repeats": len(summaries),
        "median_repeat": middle,
        "repeat_output_throughputs": throughputs,
        "cv_output_throughput": cv,
        "unstable": not cv <= UNSTABLE_CV,
        "valid": all(s["valid"] for s in summaries),
        "invalid_reasons": reasons,
    }


def _nan_last(value: float) -> tuple[bool, float]:
    return (not math.isfinite(value), value if math.isfinite(value) else 0.0)
