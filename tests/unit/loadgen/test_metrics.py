import math

import pytest

from sweeper.loadgen.metrics import (
    STAT_NAMES,
    achieved_concurrency,
    inter_token_latencies_s,
    percentile_summary,
    summarize_level,
    time_per_output_token_s,
)
from tests.support.samples import make_failure, make_sample, two_requests


def test_throughputs_follow_bench_serving():
    m = summarize_level(two_requests(), concurrency=2, duration_s=1.0)
    assert m["duration"] == 1.0
    assert m["completed"] == 2 and m["failed"] == 0
    assert m["total_input_tokens"] == 20
    assert m["total_output_tokens"] == 8
    assert m["request_throughput"] == pytest.approx(2.0)
    assert m["input_throughput"] == pytest.approx(20.0)
    assert m["output_throughput"] == pytest.approx(8.0)
    assert m["total_throughput"] == pytest.approx(28.0)
    assert m["max_concurrent_requests"] == 2
    assert m["concurrency"] == pytest.approx(1.98)
    assert m["valid"] is True and m["invalid_reasons"] == []
    assert m["errors"] == []
    assert m["time_scale"] == 1.0


def test_ttft_percentiles_in_ms():
    m = summarize_level(two_requests(), concurrency=2, duration_s=1.0)
    assert m["mean_ttft_ms"] == pytest.approx(150.0)
    assert m["median_ttft_ms"] == pytest.approx(150.0)
    assert m["std_ttft_ms"] == pytest.approx(50.0)
    assert m["p90_ttft_ms"] == pytest.approx(190.0)
    assert m["p95_ttft_ms"] == pytest.approx(195.0)
    assert m["p99_ttft_ms"] == pytest.approx(199.0)


def test_itl_splits_a_multi_token_chunk_evenly():
    # A: 200, 200, then a 400 ms gap over 2 tokens -> 200, 200. B: 400, 400.
    m = summarize_level(two_requests(), concurrency=2, duration_s=1.0)
    assert m["mean_itl_ms"] == pytest.approx(1600 / 6)
    assert m["median_itl_ms"] == pytest.approx(200.0)
    assert m["std_itl_ms"] == pytest.approx(math.sqrt(80000 / 9))
    assert m["p90_itl_ms"] == pytest.approx(400.0)
    assert m["p99_itl_ms"] == pytest.approx(400.0)


def test_tpot_and_e2e_latency():
    m = summarize_level(two_requests(), concurrency=2, duration_s=1.0)
    # A: (1.0 - 0.2) / 4 = 200 ms; B: (0.98 - 0.1) / 2 = 440 ms.
    assert m["mean_tpot_ms"] == pytest.approx(320.0)
    assert m["median_tpot_ms"] == pytest.approx(320.0)
    assert m["p99_tpot_ms"] == pytest.approx(200 + 0.99 * 240)
    assert m["mean_e2e_latency_ms"] == pytest.approx(990.0)
    assert m["p90_e2e_latency_ms"] == pytest.approx(998.0)


def test_every_stat_key_present():
    m = summarize_level(two_requests(), concurrency=2, duration_s=1.0)
    for name in ("ttft", "itl", "tpot", "e2e_latency"):
        for stat in STAT_NAMES:
            assert f"{stat}_{name}_ms" in m


def test_time_scale_converts_wall_to_modelled_time():
    # wall = modelled * 0.5: every duration doubles, rates halve, concurrency is unchanged.
    m = summarize_level(two_requests(), concurrency=2, duration_s=1.0, time_scale=0.5)
    assert m["time_scale"] == 0.5
    assert m["duration"] == pytest.approx(2.0)
    assert m["output_throughput"] == pytest.approx(4.0)
    assert m["request_throughput"] == pytest.approx(1.0)
    assert m["mean_ttft_ms"] == pytest.approx(300.0)
    assert m["median_itl_ms"] == pytest.approx(400.0)
    assert m["mean_tpot_ms"] == pytest.approx(640.0)
    assert m["mean_e2e_latency_ms"] == pytest.approx(1980.0)
    assert m["concurrency"] == pytest.approx(1.98)
    assert m["valid"] is True


def test_time_scale_must_be_positive():
    with pytest.raises(ValueError):
        summarize_level(two_requests(), concurrency=2, duration_s=1.0, time_scale=0)


def test_failed_request_makes_level_invalid_and_is_left_out_of_stats():
    samples = two_requests() + [make_failure("HTTP 500: boom"), make_failure("HTTP 500: boom")]
    m = summarize_level(samples, concurrency=2, duration_s=1.0)
    assert m["completed"] == 2 and m["failed"] == 2
    assert m["total_output_tokens"] == 8
    assert m["errors"] == ["HTTP 500: boom"]
    assert m["valid"] is False
    assert len(m["invalid_reasons"]) == 1
    assert "2 of 4 requests failed" in m["invalid_reasons"][0]
    assert "HTTP 500: boom" in m["invalid_reasons"][0]


def test_errors_keep_at_most_five_distinct():
    samples = two_requests() + [make_failure(f"err {i % 7}") for i in range(20)]
    m = summarize_level(samples, concurrency=2, duration_s=1.0)
    assert m["errors"] == [f"err {i}" for i in range(5)]


def test_usage_disagreeing_with_stream_is_invalid():
    a, b = two_requests()
    a.output_tokens = 7  # the server claims 7, only 5 streamed in
    m = summarize_level([a, b], concurrency=2, duration_s=1.0)
    assert m["valid"] is False
    assert m["total_output_tokens"] == 10  # usage counts are what bench_serving reports
    assert m["total_streamed_tokens"] == 8
    [reason] = m["invalid_reasons"]
    assert "usage" in reason and "usage 7, streamed 5" in reason


def test_fewer_tokens_than_requested_is_invalid():
    m = summarize_level(two_requests(), concurrency=2, duration_s=1.0, requested_output_len=5)
    assert m["valid"] is False
    [reason] = m["invalid_reasons"]
    assert "fewer tokens than requested" in reason and "3 of 5" in reason


def test_requested_length_defaults_to_each_requests_own():
    a, b = two_requests()
    b.requested_output_tokens = 4
    m = summarize_level([a, b], concurrency=2, duration_s=1.0)
    assert any("fewer tokens than requested" in r for r in m["invalid_reasons"])
    # 0 turns the check off.
    assert summarize_level([a, b], concurrency=2, duration_s=1.0, requested_output_len=0)["valid"]


def test_low_achieved_concurrency_is_invalid():
    m = summarize_level(two_requests(), concurrency=4, duration_s=1.0)
    assert m["concurrency"] == pytest.approx(1.98)
    assert m["max_concurrent_requests"] == 4
    assert m["valid"] is False
    [reason] = m["invalid_reasons"]
    assert "concurrency 1.98" in reason and "target 4" in reason


def test_concurrency_just_above_threshold_is_valid():
    samples = [make_sample(0.0, [0.1, 0.96]) for _ in range(4)]
    assert summarize_level(samples, concurrency=4, duration_s=1.0)["valid"]  # 3.84 >= 95% of 4
    samples = [make_sample(0.0, [0.1, 0.94]) for _ in range(4)]
    assert not summarize_level(samples, concurrency=4, duration_s=1.0)["valid"]


def test_empty_input_gives_nan_stats_and_invalid():
    m = summarize_level([], concurrency=4, duration_s=0.0)
    assert m["completed"] == 0 and m["failed"] == 0
    assert math.isnan(m["mean_ttft_ms"]) and math.isnan(m["p99_itl_ms"])
    assert math.isnan(m["output_throughput"])
    assert m["valid"] is False
    assert "no requests were sent" in m["invalid_reasons"]


def test_all_failed_gives_nan_latencies_and_zero_throughput():
    m = summarize_level(
        [make_failure(), make_failure("timeout after 1 s")], concurrency=2, duration_s=2.0
    )
    assert m["completed"] == 0 and m["failed"] == 2
    assert m["output_throughput"] == 0.0
    assert m["concurrency"] == 0.0
    for name in ("ttft", "itl", "tpot", "e2e_latency"):
        assert all(math.isnan(m[f"{stat}_{name}_ms"]) for stat in STAT_NAMES)
    assert m["valid"] is False
    assert m["errors"] == ["HTTP 500: boom", "timeout after 1 s"]


def test_single_token_request_has_no_tpot_or_itl():
    s = make_sample(0.0, [0.3])
    assert time_per_output_token_s(s) is None
    assert inter_token_latencies_s(s) == []
    m = summarize_level([s], concurrency=1, duration_s=0.3)
    assert m["mean_ttft_ms"] == pytest.approx(300.0)
    assert math.isnan(m["mean_tpot_ms"]) and math.isnan(m["mean_itl_ms"])


def test_tpot_uses_reported_output_tokens():
    s = make_sample(0.0, [0.1, 0.2, 0.5], end=0.5, output_tokens=5, usage_reported=False)
    assert time_per_output_token_s(s) == pytest.approx(0.1)


def test_percentile_summary_names_and_empty():
    assert percentile_summary([10.0, 20.0, 30.0], "x") == pytest.approx(
        {
            "mean_x_ms": 20.0,
            "median_x_ms": 20.0,
            "std_x_ms": math.sqrt(200 / 3),
            "p90_x_ms": 28.0,
            "p95_x_ms": 29.0,
            "p99_x_ms": 29.8,
        }
    )
    assert all(math.isnan(v) for v in percentile_summary([], "x").values())


def test_achieved_concurrency_is_total_latency_over_duration():
    assert achieved_concurrency([1.0, 2.0, 3.0], 2.0) == 3.0
    assert math.isnan(achieved_concurrency([], 0.0))


# ---------------------------------------------------------------- goodput, client lag, repeats

from sweeper.loadgen.lag import LagStats, lag_stats  # noqa: E402
from sweeper.loadgen.metrics import (  # noqa: E402
    MAX_CLIENT_LAG_P99_MS,
    UNSTABLE_CV,
    coefficient_of_variation,
    combine_repeats,
    slo_met,
)


def test_goodput_counts_requests_meeting_both_slos():
    a, b = two_requests()  # A: TTFT 200 ms, TPOT 200 ms; B: TTFT 100 ms, TPOT 440 ms
    assert slo_met(a, 0.25, 0.25) and not slo_met(b, 0.25, 0.25)
    assert not slo_met(a, 0.15, None) and slo_met(b, 0.15, None)
    m = summarize_level([a, b], concurrency=2, duration_s=2.0, slo_ttft_ms=250, slo_tpot_ms=250)
    assert m["request_goodput"] == pytest.approx(0.5)
    assert m["slo_ttft_ms"] == 250 and m["slo_tpot_ms"] == 250
    assert summarize_level([a, b], 2, 2.0, slo_ttft_ms=1000)["request_goodput"] == pytest.approx(1.0)
    assert summarize_level([a, b], 2, 2.0)["request_goodput"] is None


def test_goodput_slos_are_in_modelled_time():
    a, _ = two_requests()  # wall TTFT 200 ms = 400 modelled ms at time_scale 0.5
    m = summarize_level([a], 1, 1.0, time_scale=0.5, slo_ttft_ms=300, requested_output_len=0)
    assert m["request_goodput"] == 0.0
    m = summarize_level([a], 1, 1.0, time_scale=0.5, slo_ttft_ms=450, requested_output_len=0)
    assert m["request_goodput"] == pytest.approx(0.5)


def test_failed_requests_never_meet_slos():
    assert not slo_met(make_failure(), None, None)


def test_client_lag_above_threshold_is_invalid():
    ok = LagStats(ticks=100, median_ms=0.1, p99_ms=MAX_CLIENT_LAG_P99_MS, max_ms=9.0)
    bad = LagStats(ticks=100, median_ms=3.0, p99_ms=MAX_CLIENT_LAG_P99_MS + 0.1, max_ms=40.0)
    assert summarize_level(two_requests(), 2, 1.0, lag=ok)["valid"]
    m = summarize_level(two_requests(), 2, 1.0, lag=bad)
    assert m["client_lag_p99_ms"] == bad.p99_ms and m["client_lag_max_ms"] == 40.0
    [reason] = m["invalid_reasons"]
    assert reason.startswith("client lagged: event-loop p99 lag 5.1 ms above 5 ms")


def test_lag_stats_are_ms_and_zero_when_empty():
    assert lag_stats([]) == LagStats(0, 0.0, 0.0, 0.0)
    stats = lag_stats([0.001] * 99 + [0.1])
    assert stats.ticks == 100 and stats.median_ms == pytest.approx(1.0)
    assert stats.max_ms == pytest.approx(100.0)


def test_open_loop_has_no_concurrency_check():
    m = summarize_level(two_requests(), concurrency=None, duration_s=10.0)
    assert m["valid"] and m["max_concurrent_requests"] is None


def test_missing_usage_is_invalid():
    a = make_sample(0.0, [0.1, 0.2], usage_reported=False)
    [reason] = summarize_level([a], 1, 0.2)["invalid_reasons"]
    assert "reported no usage" in reason


def test_coefficient_of_variation():
    assert coefficient_of_variation([10.0]) == 0.0
    assert coefficient_of_variation([9.0, 10.0, 11.0]) == pytest.approx(0.1)
    assert math.isnan(coefficient_of_variation([0.0, 0.0]))


def _summary(throughput, valid=True, reasons=()):
    return {"output_throughput": throughput, "valid": valid, "invalid_reasons": list(reasons)}


def test_combine_repeats_keeps_the_median_repeat():
    m = combine_repeats([_summary(10.0), _summary(12.0), _summary(11.0)])
    assert m["output_throughput"] == 11.0 and m["median_repeat"] == 2
    assert m["repeats"] == 3 and m["repeat_output_throughputs"] == [10.0, 12.0, 11.0]
    assert m["cv_output_throughput"] == pytest.approx(1 / 11)
    assert m["unstable"] is True and m["valid"] is True  # unstable is a flag, not invalidity


def test_combine_repeats_even_count_takes_the_lower_middle_and_stable():
    m = combine_repeats([_summary(100.0), _summary(101.0)])
    assert m["output_throughput"] == 100.0
    assert m["cv_output_throughput"] < UNSTABLE_CV and m["unstable"] is False


def test_combine_repeats_one_invalid_repeat_invalidates_the_level():
    m = combine_repeats([_summary(10.0), _summary(10.0, False, ["1 of 4 requests failed: x"])])
    assert m["valid"] is False
    assert m["invalid_reasons"] == ["repeat 2: 1 of 4 requests failed: x"]


def test_combine_one_repeat_is_that_repeat():
    m = combine_repeats([_summary(10.0, False, ["r"])])
    assert m["invalid_reasons"] == ["r"] and m["cv_output_throughput"] == 0.0
    assert m["unstable"] is False
    with pytest.raises(ValueError):
        combine_repeats([])


def test_a_coarse_stream_is_reported_not_invalid():
    """Three chunks carrying 4 tokens each (a server that sends several tokens per chunk): the
    numbers stand, but the level says its TTFT/ITL are coarse."""
    samples = [make_sample(0.0, [0.1, 0.2, 0.3], chunk_tokens=[4, 4, 4]) for _ in range(2)]
    m = summarize_level(samples, None, 0.3)
    assert m["valid"], m["invalid_reasons"]
    assert (m["total_chunks"], m["tokens_per_chunk"], m["coarse_stream"]) == (6, 4.0, True)
    assert m["stream_notes"] and "coarse stream: 6 chunks carried 24 tokens (4.0 per chunk)" in m["stream_notes"][0]


def test_a_fine_stream_has_no_note_and_estimates_are_counted():
    fine = make_sample(0.0, [0.1, 0.2, 0.3])
    estimated = make_sample(0.0, [0.1, 0.2, 0.3], chunk_tokens=[1, 1, 2])
    estimated.tokens_estimated = True
    m = summarize_level([fine], None, 0.3)
    assert not m["coarse_stream"] and m["stream_notes"] == [] and m["chunk_tokens_estimated"] == 0
    m = summarize_level([fine, estimated], None, 0.3)
    assert not m["coarse_stream"] and m["chunk_tokens_estimated"] == 1
    assert m["stream_notes"] == ["1 of 2 requests: tokens per chunk spread from the server's final usage "
                                 "count (it reports none per chunk)"]
