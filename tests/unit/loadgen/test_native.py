import json
import math

import pytest

from sweeper.loadgen.native_results import parse_bench_serving_lines, parse_vllm_result
from tests.support.paths import FIXTURE_DIR

FIXTURES = FIXTURE_DIR / "native"


def test_sglang_output_file_lines_become_level_records():
    first, second = parse_bench_serving_lines((FIXTURES / "sglang_bench_serving.jsonl").read_text())
    assert first["source"] == "sglang.bench_serving"
    assert first["max_concurrency"] == 16
    assert first["completed"] == 64 and first["failed"] == 0
    assert first["output_throughput"] == pytest.approx(105.7566)
    assert first["total_throughput"] == pytest.approx(528.7831)
    assert first["input_throughput"] == pytest.approx(423.0265)
    assert first["concurrency"] == pytest.approx(15.9042)
    assert first["median_ttft_ms"] == pytest.approx(998.7)
    assert first["p90_e2e_latency_ms"] == pytest.approx(4911.5)
    assert first["p95_itl_ms"] == pytest.approx(131.2)
    assert "p95_ttft_ms" not in first  # absent statistics are not invented
    assert math.isinf(first["request_rate"])  # bench_serving writes Infinity
    assert first["valid"] and first["invalid_reasons"] == []
    assert second["failed"] == 1 and not second["valid"]
    assert second["invalid_reasons"] == [
        "1 requests failed: ClientPayloadError: Response payload is not completed"
    ]


def test_vllm_save_result_becomes_a_level_record():
    record = parse_vllm_result((FIXTURES / "vllm_bench_serve.json").read_text())
    assert record["source"] == "vllm bench serve"
    assert record["total_throughput"] == pytest.approx(1547.48)  # from total_token_throughput
    assert record["input_throughput"] == pytest.approx(512 / 0.3412)
    assert record["max_concurrency"] == 2 and record["peak_concurrent_requests"] == 2
    assert record["request_rate"] is None  # "inf" as a string
    assert record["request_goodput"] is None
    assert record["median_e2e_latency_ms"] == pytest.approx(164.1)  # from median_e2el_ms
    # Rebuilt from per-request ttft + sum(itl): (0.1021+0.0603) + (0.0987+0.06) + ... over 0.3412
    expected = (0.1021 + 0.0987 + 0.1103 + 0.1056 + 0.0603 + 0.06 + 0.0604 + 0.0602) / 0.3412
    assert record["concurrency"] == pytest.approx(expected)
    assert record["valid"] and record["unchecked"]


def test_vllm_failures_make_the_record_invalid():
    raw = json.loads((FIXTURES / "vllm_bench_serve.json").read_text())
    raw |= {"completed": 3, "failed": 1, "errors": ["", "", "", "HTTP 500: boom"]}
    record = parse_vllm_result(raw)
    assert not record["valid"]
    assert record["invalid_reasons"] == ["1 requests failed: HTTP 500: boom"]
