"""`sweeper load` against a real streaming server on a real socket: launches nothing."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from sweeper.cli import app
from tests.support.fake_servers import MODEL


def test_load_writes_bench_serving_records(serve, tmp_path):
    server = serve(token_delay_s=0.005)
    out = tmp_path / "levels.json"
    # 8 rounds at C=4: the drain after the last send (its requests' ends scattered by a busy machine)
    # weighs 1/8 of the level. With 2 rounds it held 3.67 of 4 in flight, invalid (clean clone of 512e74e).
    result = CliRunner().invoke(app, [
        "load", server.base_url, "--concurrency", "1,4", "--input-len", "8", "--output-len", "6",
        "--requests-per-level", "32", "--model", MODEL, "--json-file", str(out), "--slo-ttft-ms", "1000",
        "--slo-tpot-ms", "1000",
    ])
    assert result.exit_code == 0, result.output
    records = json.loads(out.read_text())
    assert [r["max_concurrency"] for r in records] == [1, 4]
    for r in records:
        assert r["completed"] == 32 and r["valid"] is True and r["invalid_reason"] is None
        assert r["output_throughput"] > 0 and r["total_throughput"] > r["output_throughput"]
        assert r["request_goodput"] == r["request_throughput"]
        for key in ("median_ttft_ms", "p99_itl_ms", "mean_tpot_ms", "median_e2e_latency_ms", "concurrency"):
            assert r[key] > 0
    assert records[1]["concurrency"] > 3.5
    assert server.state.payloads[0]["stream_options"]["continuous_usage_stats"] is True
    assert "out tok/s" in result.output


def test_load_marks_a_short_server_invalid_and_exits_3(serve, tmp_path):
    server = serve(stop_after=2)
    out = tmp_path / "levels.json"
    result = CliRunner().invoke(app, ["load", server.base_url, "--concurrency", "2", "--output-len", "5",
                                      "--input-len", "4", "--model", MODEL, "--json-file", str(out)])
    assert result.exit_code == 3, result.output
    [record] = json.loads(out.read_text())
    assert record["valid"] is False
    assert "fewer tokens than requested (e.g. 2 of 5)" in record["invalid_reason"]


def test_load_chat_api(serve):
    server = serve()
    result = CliRunner().invoke(app, ["load", server.base_url, "--concurrency", "2", "--api", "chat",
                                      "--output-len", "4", "--input-len", "5", "--model", MODEL])
    assert result.exit_code == 0, result.output
    assert "messages" in server.state.payloads[0]


def test_load_rejects_bad_levels(serve):
    result = CliRunner().invoke(app, ["load", "http://127.0.0.1:1", "--concurrency", "a,b", "--model", "m"])
    assert result.exit_code == 2


def test_load_names_the_model_from_v1_models_when_none_is_given(serve):
    server = serve()
    # 16 tokens: a level of 0.33 s, where a busy machine's few ms before the first send do not
    # pull the achieved concurrency below 95% (3 tokens, 64 ms: 0.94 of 1 in a clean-clone run)
    result = CliRunner().invoke(app, ["load", server.base_url, "--concurrency", "1", "--output-len", "16",
                                      "--input-len", "4"])
    assert result.exit_code == 0, result.output
    assert server.state.payloads[0]["model"] == MODEL


def test_load_without_a_model_and_no_v1_models_says_pass_model():
    result = CliRunner().invoke(app, ["load", "http://127.0.0.1:1", "--concurrency", "1"])
    assert result.exit_code != 0
    assert "cannot read a model name from http://127.0.0.1:1/v1/models" in result.output
    assert "pass --model" in result.output
