"""The capacity search (loadgen/capacity.py) against deterministic measure functions whose true
capacity is known: it must land on it, report every level it measured, and measure few."""

import math

import pytest

from sweeper.loadgen.capacity import CapacitySlo, capacity_record, find_capacity


def queue_ttft(batch: int, ttft_ms: float, service_ms: float):
    """p99 TTFT of a closed loop at C against a server of `batch` slots (refserver --max-batch)."""
    def measure(load):
        return {"valid": True, "p99_ttft_ms": ttft_ms + (math.ceil(load / batch) - 1) * service_ms,
                "p99_tpot_ms": 5.0}
    return measure


@pytest.mark.parametrize("batch,slo_ms,truth", [(8, 100, 8), (8, 250, 16), (3, 900, 18), (5, 30, 5)])
def test_concurrency_capacity_is_exact(batch, slo_ms, truth):
    calls = []
    measure = queue_ttft(batch, 20, 175)

    def counted(load):
        calls.append(load)
        return measure(load)

    found = find_capacity(counted, CapacitySlo(p99_ttft_ms=slo_ms), ceiling=512)
    assert found.capacity == truth and not found.capped
    assert found.first_failing == truth + 1  # the SLO holds at the answer and fails one above
    assert [t.load for t in found.levels] == calls and len(set(calls)) == len(calls)
    assert len(calls) <= 2 * math.log2(512) + 1


def test_slo_broken_at_one_is_zero_and_holding_at_the_ceiling_is_capped():
    found = find_capacity(queue_ttft(4, 50, 100), CapacitySlo(p99_ttft_ms=40))
    assert (found.capacity, found.capped, [t.load for t in found.levels]) == (0, False, [1])
    found = find_capacity(queue_ttft(4, 10, 100), CapacitySlo(p99_tpot_ms=6), ceiling=48)
    assert (found.capacity, found.capped, [t.load for t in found.levels]) == (48, True, [1, 2, 4, 8, 16, 32, 48])


def test_both_slos_the_tighter_one_binds():
    def measure(c):
        return {"valid": True, "p99_ttft_ms": 10.0 * c, "p99_tpot_ms": 2.0 * c}
    assert find_capacity(measure, CapacitySlo(p99_ttft_ms=95, p99_tpot_ms=13)).capacity == 6
    assert find_capacity(measure, CapacitySlo(p99_ttft_ms=55, p99_tpot_ms=100)).capacity == 5


def test_a_level_with_failed_requests_never_holds_and_other_validity_is_no_verdict():
    def measure(c):
        return {"valid": c < 5, "failed": int(c >= 7), "p99_ttft_ms": 1.0}
    found = find_capacity(measure, CapacitySlo(p99_ttft_ms=100))
    assert found.capacity == 6
    assert next(t for t in found.levels if t.load == 7).reasons == ["1 request(s) failed"]


def test_rate_capacity_to_a_fraction():
    true_rate = 13.7  # the SLO holds at or below it

    def measure(rate):
        return {"valid": True, "p99_ttft_ms": 50.0 if rate <= true_rate else 500.0}
    found = find_capacity(measure, CapacitySlo(p99_ttft_ms=100), start=1.0, ceiling=1000, resolution=0.05,
                          relative=True, integer=False)
    assert found.capacity <= true_rate < found.first_failing <= found.capacity * 1.05
    # a start above the capacity halves down first
    found = find_capacity(measure, CapacitySlo(p99_ttft_ms=100), start=100.0, ceiling=1000, resolution=0.05,
                          relative=True, integer=False)
    assert [t.load for t in found.levels][:4] == [100.0, 50.0, 25.0, 12.5]
    assert found.capacity <= true_rate < found.first_failing <= found.capacity * 1.05


def test_record_names_the_axis_and_keeps_the_order():
    found = find_capacity(queue_ttft(2, 10, 100), CapacitySlo(p99_ttft_ms=50))
    record = capacity_record(found, "concurrency", CapacitySlo(p99_ttft_ms=50), lambda m: {"p99": m["p99_ttft_ms"]})
    assert record["capacity_concurrency"] == 2 and record["first_failing"] == 3
    assert [(lv["load"], lv["slo_holds"]) for lv in record["levels"]] == [(1, True), (2, True), (4, False), (3, False)]
    assert record["levels"][2]["slo_broken_by"] == ["p99_ttft_ms 110.0 > 50"]


def test_no_slo_is_refused():
    with pytest.raises(ValueError, match="needs an SLO"):
        CapacitySlo()
