"""`sweeper load --find-capacity` as a user runs it, against bench/refserver.py with a batch
limit: the true capacity at a TTFT SLO is known, and the search must find it."""

from __future__ import annotations

import json

from tests.support.refserver import closed_loop_p99_ttft_ms, refserver

# A slot is busy 120 ms per request: steps of 120 ms in TTFT, far above a busy runner's jitter.
TTFT_MS, GAP_MS, BATCH, OUTPUT_LEN = 50.0, 10.0, 4, 8


def test_find_capacity_in_concurrency_lands_on_the_truth(cli):
    slo_ms = 230.0  # holds up to 2 waves: C = 8 (170 ms); C = 9 waits a third wave (290 ms)
    assert closed_loop_p99_ttft_ms(8, BATCH, TTFT_MS, GAP_MS, OUTPUT_LEN) < slo_ms
    assert closed_loop_p99_ttft_ms(9, BATCH, TTFT_MS, GAP_MS, OUTPUT_LEN) > slo_ms
    with refserver(TTFT_MS, GAP_MS, max_batch=BATCH) as url:
        result = cli.run("load", url, "--find-capacity", "--slo-p99-ttft-ms", str(slo_ms), "--input-len", "8",
                         "--output-len", str(OUTPUT_LEN), "--max-concurrency", "16", "--json-file", "cap.json",
                         "--max-client-lag-ms", "50", "--min-rounds", "10")
    assert result.returncode == 0, result.stderr + result.stdout
    record = json.loads((cli.workdir / "cap.json").read_text())
    assert record["capacity_concurrency"] == 8 and record["first_failing"] == 9 and not record["capped"]
    loads = [level["load"] for level in record["levels"]]
    assert loads[:5] == [1, 2, 4, 8, 16] and len(loads) == len(set(loads)) <= 9
    for level in record["levels"]:
        assert level["slo_holds"] == (level["load"] <= 8)
        assert level["max_concurrency"] == level["load"] and level["completed"] > 0
    assert "capacity within the SLO: 8 concurrent" in result.stdout


def test_find_capacity_in_rate(cli):
    # Fixed arrivals: 4 slots of 120 ms serve 33.3 req/s; above that the queue grows over the level
    # (at 36 req/s by 2.2 ms a request: past the SLO within the level's 180 requests, 5 s of arrivals).
    # From 16 req/s: 7 levels (16, 32, 64, then halving down to 34), 55 s; from 4, 9 levels, 67 s.
    with refserver(TTFT_MS, GAP_MS, max_batch=BATCH) as url:
        result = cli.run("load", url, "--find-capacity", "--rate", "16", "--fixed-rate", "--slo-p99-ttft-ms", "100",
                         "--input-len", "8", "--output-len", str(OUTPUT_LEN), "--resolution", "0.1", "--max-client-lag-ms", "50",
                         "--json-file", "cap.json")
    assert result.returncode == 0, result.stderr + result.stdout
    record = json.loads((cli.workdir / "cap.json").read_text())
    assert 20 <= record["capacity_rate"] <= 36 and record["first_failing"] <= record["capacity_rate"] * 1.1
    assert [level["load"] for level in record["levels"]][:3] == [16, 32, 64]
    for level in record["levels"]:
        assert level["request_rate"] == level["load"]
        assert abs(level["achieved_request_rate"] - level["load"]) < 0.2 * level["load"]


def test_find_capacity_needs_an_slo(cli):
    result = cli.run("load", "http://127.0.0.1:9", "--model", "m", "--find-capacity")
    assert result.returncode != 0 and "--find-capacity needs an SLO" in result.stderr + result.stdout
