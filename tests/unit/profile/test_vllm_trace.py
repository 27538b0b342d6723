"""A real vLLM 0.24.0 worker trace (tests/fixtures/vllm/vllm-0.24.0_rank0.pt.trace.json.gz,
--profiler-config on the H200) through `sweeper kernels`' summary."""


from sweeper.profile.command import summarize_trace_files
from tests.support.paths import FIXTURE_DIR

TRACE = FIXTURE_DIR / "vllm" / "vllm-0.24.0_rank0.pt.trace.json.gz"


def test_the_real_vllm_trace_gives_its_kernel_table():
    result = summarize_trace_files([TRACE], 6)
    groups = {g["group"]: g for g in result.record["groups"]}
    assert result.record["kernels"][0]["name"] == "fused_moe_kernel"
    assert groups["moe_gemm"]["share"] > 0.5  # a 32-expert MoE at batch 8: the experts dominate
    assert groups["attention"]["share"] > 0.1  # FA3's sm90 kernel is recognised as attention
    assert "fused_moe_kernel" in result.text


def test_the_real_vllm_bench_serve_json_reads_into_a_level_record():
    """`vllm bench serve --save-result --save-detailed` 0.24.0 at C=4 on the H200
    (tests/fixtures/vllm/vllm_bench_c4.json), through loadgen/native_results.py."""
    from sweeper.loadgen.native_results import parse_vllm_result

    record = parse_vllm_result((TRACE.parent / "vllm_bench_c4.json").read_text())
    assert record["completed"] == 32 and record["total_output_tokens"] == 2048
    assert record["max_concurrency"] == 4 and abs(record["concurrency"] - 4) < 0.05  # rebuilt from ttfts + itls
    assert abs(record["output_throughput"] - 1264.87) < 0.01
    assert abs(record["mean_itl_ms"] - 2.860) < 0.001
    assert record["valid"] and "usage vs streamed tokens" in record["unchecked"]
