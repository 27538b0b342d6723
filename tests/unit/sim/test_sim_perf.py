"""Pure checks of the simulated server's performance and failure model (sweeper.sim.perf)."""

from __future__ import annotations

import argparse
import itertools
from dataclasses import replace

import pytest

from sweeper.sim.args import parse_args
from sweeper.sim.perf import (
    BASELINE, OPTIMUM, SimConfig, active_experts, failure_of, modelled_level_metrics,
    modelled_output_throughput, prefill_time_ms, round_time_ms, sim_config_from, step_breakdown_ms,
    step_time_ms,
)

FAILURE_LINES = {
    "unsupported": "is only supported on",
    "not_enough_memory": "Not enough memory. Please try to increase --mem-fraction-static",
    "oom": "torch.OutOfMemoryError: CUDA out of memory",
    "cuda_graph_capture": "Capture cuda graph failed",
}


def c16(cfg: SimConfig) -> float:
    return modelled_output_throughput(cfg, 128, 32, 16)


def c1(cfg: SimConfig) -> float:
    return modelled_output_throughput(cfg, 128, 32, 1)


def share(cfg: SimConfig, part: str, batch: int) -> float:
    parts = step_breakdown_ms(cfg, batch)
    return parts[part] / sum(parts.values())


# ---- calibration against the case study ----

def test_baseline_is_healthy():
    assert failure_of(BASELINE) is None
    assert failure_of(OPTIMUM) is None


def test_baseline_step_times_match_case_study():
    assert step_time_ms(BASELINE, 1) == pytest.approx(94.0, rel=0.05)
    assert step_time_ms(BASELINE, 16) == pytest.approx(700.0, rel=0.05)
    assert 20.0 <= c16(BASELINE) <= 26.0  # "~23-25 tok/s at C=16"
    assert 9.0 <= c1(BASELINE) <= 11.5  # "roughly 10 tok/s" at batch 1


def test_step_time_grows_with_batch():
    times = [step_time_ms(BASELINE, b) for b in (1, 2, 4, 8, 16)]
    assert times == sorted(times)


def test_attention_is_the_bottleneck_at_batch_16():
    assert 0.60 <= share(BASELINE, "attention", 16) <= 0.65
    assert max(step_breakdown_ms(OPTIMUM, 16), key=step_breakdown_ms(OPTIMUM, 16).get) == "attention"


def test_communication_is_about_two_percent():
    for batch in (1, 16):
        assert 0.015 <= share(BASELINE, "communication", batch) <= 0.025


def test_nccl_knobs_are_negligible():
    variants = [replace(BASELINE, nccl_proto=p, nccl_algo=a)
                for p, a in itertools.product((None, "LL", "LL128", "Simple"), (None, "Ring", "Tree"))]
    for batch in (1, 16):
        times = [step_time_ms(v, batch) for v in variants]
        assert (max(times) - min(times)) / min(times) < 0.01
    assert step_time_ms(replace(BASELINE, nccl_proto="LL"), 16) < step_time_ms(BASELINE, 16)
    assert step_time_ms(replace(BASELINE, nccl_proto="Simple"), 16) > step_time_ms(BASELINE, 16)


def test_expert_parallel_wins_at_c16_not_at_c1():
    ep8 = replace(BASELINE, ep_size=8)
    gain = c16(ep8) / c16(BASELINE) - 1.0
    assert 0.10 <= gain <= 0.20
    assert c1(ep8) <= c1(BASELINE)
    assert step_time_ms(ep8, 1) > step_time_ms(BASELINE, 1)


def test_moe_grows_with_distinct_experts():
    assert active_experts(1) == pytest.approx(8.0)
    assert active_experts(16) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 16))
    moe = [step_breakdown_ms(BASELINE, b)["moe"] for b in (1, 4, 16)]
    assert moe == sorted(moe)


def test_cuda_graphs_help_a_few_percent_at_batch_1_only():
    eager = replace(BASELINE, disable_cuda_graph=True)
    gain_b1 = step_time_ms(eager, 1) / step_time_ms(BASELINE, 1) - 1.0
    gain_b16 = step_time_ms(eager, 16) / step_time_ms(BASELINE, 16) - 1.0
    assert 0.03 <= gain_b1 <= 0.07
    assert 0.0 < gain_b16 < 0.01
    # Graphs only cover batches up to cuda_graph_max_bs.
    small_graphs = replace(BASELINE, cuda_graph_max_bs=8)
    assert step_time_ms(small_graphs, 4) == pytest.approx(step_time_ms(BASELINE, 4))
    assert step_time_ms(small_graphs, 16) == pytest.approx(step_time_ms(eager, 16))


def test_backend_effects():
    mxfp4 = replace(BASELINE, moe_runner_backend="flashinfer_mxfp4")
    moe_ratio = step_breakdown_ms(mxfp4, 16)["moe"] / step_breakdown_ms(BASELINE, 16)["moe"]
    assert 0.93 <= moe_ratio <= 0.99
    torch_native = replace(BASELINE, attention_backend="torch_native")
    attn_ratio = step_breakdown_ms(torch_native, 16)["attention"] / step_breakdown_ms(BASELINE, 16)["attention"]
    assert attn_ratio == pytest.approx(1.5)
    tp4 = replace(BASELINE, tp_size=4)
    assert step_breakdown_ms(tp4, 16)["attention"] > step_breakdown_ms(BASELINE, 16)["attention"]


def test_flashinfer_a2a_is_cheaper_communication_but_loses_graphs():
    none_eager = replace(OPTIMUM, disable_cuda_graph=True)
    flashinfer = replace(OPTIMUM, moe_a2a_backend="flashinfer", disable_cuda_graph=True)
    assert failure_of(flashinfer) is None
    assert step_breakdown_ms(flashinfer, 16)["communication"] < step_breakdown_ms(none_eager, 16)["communication"]
    assert c16(flashinfer) < c16(OPTIMUM)


def test_max_running_requests_caps_the_batch():
    capped = replace(BASELINE, max_running_requests=4)
    expected = 4 * 32 / round_time_ms(BASELINE, 128, 32, 4) * 1000.0
    assert c16(capped) == pytest.approx(expected)
    assert c16(capped) < c16(BASELINE)
    metrics = modelled_level_metrics(capped, 128, 32, 16)
    assert metrics.ttft_ms > 3 * round_time_ms(BASELINE, 128, 32, 4) * 0.9  # waits ~3 rounds in queue


def test_prefill_is_chunked_and_small():
    assert prefill_time_ms(BASELINE, 2048) < 0.05 * 31 * step_time_ms(BASELINE, 16)
    small_chunks = replace(BASELINE, chunked_prefill_size=512)
    assert prefill_time_ms(small_chunks, 2048) > prefill_time_ms(BASELINE, 2048)
    unchunked = replace(BASELINE, chunked_prefill_size=-1)
    assert prefill_time_ms(unchunked, 100_000) < prefill_time_ms(BASELINE, 100_000)


def test_throughput_is_consistent_with_step_and_prefill_times():
    for cfg in (BASELINE, OPTIMUM):
        for concurrency in (1, 2, 4, 8, 16):
            round_ms = prefill_time_ms(cfg, concurrency * 128) + 31 * step_time_ms(cfg, concurrency)
            assert modelled_output_throughput(cfg, 128, 32, concurrency) == pytest.approx(
                concurrency * 32 / round_ms * 1000.0)
    metrics = modelled_level_metrics(BASELINE, 128, 32, 16)
    assert metrics.itl_ms == pytest.approx(step_time_ms(BASELINE, 16))
    assert metrics.ttft_ms == pytest.approx(prefill_time_ms(BASELINE, 16 * 128))


def _grid():
    for tp, ep, moe, a2a, attention, graphs, proto, algo, mem in itertools.product(
            (1, 2, 4, 8), (1, 2, 4, 8), ("auto", "marlin", "flashinfer_mxfp4", "triton"),
            ("none", "flashinfer", "deepep"), ("auto", "triton", "torch_native", "fa3"),
            (True, False), (None, "LL", "Simple"), (None, "Ring", "Tree"), (0.70, 0.88)):
        yield SimConfig(tp_size=tp, ep_size=ep, moe_runner_backend=moe, moe_a2a_backend=a2a,
                        attention_backend=attention, disable_cuda_graph=not graphs, nccl_proto=proto,
                        nccl_algo=algo, mem_fraction_static=mem)


def test_no_config_gets_anywhere_near_1000_tok_s():
    best = max(c16(cfg) for cfg in _grid() if failure_of(cfg) is None)
    assert best == pytest.approx(c16(OPTIMUM))
    assert best < 1000.0 / 20  # tens of times short: kernel-bound
    assert c16(OPTIMUM) / c16(BASELINE) > 1.1


# ---- failure classification ----

@pytest.mark.parametrize("overrides, env, kind, phase", [
    (dict(moe_runner_backend="triton"), {}, "garbage_output", "garbage"),
    (dict(moe_runner_backend="flashinfer_cutlass"), {}, "garbage_output", "garbage"),
    (dict(moe_a2a_backend="deepep", ep_size=8), {}, "unsupported", "startup"),
    (dict(moe_a2a_backend="flashinfer", ep_size=8), {}, "cuda_graph_capture", "capture"),
    (dict(moe_a2a_backend="flashinfer", ep_size=1, disable_cuda_graph=True), {}, "unsupported", "startup"),
    (dict(attention_backend="fa3"), {}, "unsupported", "startup"),
    (dict(attention_backend="flashmla"), {}, "unsupported", "startup"),
    (dict(attention_backend="trtllm_mla"), {}, "unsupported", "startup"),
    (dict(tp_size=1, ep_size=1), {}, "not_enough_memory", "load"),
    (dict(tp_size=2, ep_size=1, mem_fraction_static=0.85), {}, "not_enough_memory", "load"),
    (dict(mem_fraction_static=0.95), {}, "oom", "load"),
    (dict(mem_fraction_static=0.90), {}, "oom", "capture"),
    (dict(), {"NCCL_P2P_DISABLE": "0"}, "hang", "hang"),
    (dict(ep_size=3), {}, "invalid_parallel", "startup"),
    (dict(ep_size=16), {}, "invalid_parallel", "startup"),
    (dict(tp_size=16), {}, "invalid_parallel", "startup"),
    (dict(mem_fraction_static=1.5), {}, "invalid_argument", "startup"),
])
def test_failure_modes_are_classified(overrides, env, kind, phase):
    cfg = replace(BASELINE, nccl_p2p_disable=env.get("NCCL_P2P_DISABLE"), **overrides)
    failure = failure_of(cfg)
    assert failure is not None and (failure.kind, failure.phase) == (kind, phase)
    logged = "\n".join(failure.log_lines)
    if kind in FAILURE_LINES:
        assert FAILURE_LINES[kind] in logged
    if phase in ("startup", "load", "capture") and kind not in ("invalid_parallel", "invalid_argument"):
        assert "Scheduler hit an exception" in logged
        assert "Received sigquit from a child process" in logged
    if kind == "hang":
        assert logged.endswith("Init torch distributed begin.")
    assert modelled_output_throughput(cfg, 128, 32, 16) == (0.0 if phase != "garbage" else pytest.approx(
        modelled_output_throughput(replace(cfg, moe_runner_backend="marlin"), 128, 32, 16)))


def test_memory_window_for_tp2_and_graph_workspace():
    tp2 = replace(BASELINE, tp_size=2)
    assert failure_of(replace(tp2, mem_fraction_static=0.89)) is None
    assert failure_of(replace(tp2, mem_fraction_static=0.87)).kind == "not_enough_memory"
    # A large capture range needs workspace: the safe fraction drops.
    assert failure_of(replace(BASELINE, mem_fraction_static=0.89, cuda_graph_max_bs=16)) is None
    assert failure_of(replace(BASELINE, mem_fraction_static=0.89, cuda_graph_max_bs=512)).kind == "oom"
    assert failure_of(replace(BASELINE, mem_fraction_static=0.90, disable_cuda_graph=True)) is None


def test_p2p_hang_needs_four_gpus_and_p2p_enabled():
    assert failure_of(replace(BASELINE, nccl_p2p_disable="1")) is None
    assert failure_of(replace(BASELINE, tp_size=2, mem_fraction_static=0.89, nccl_p2p_disable="0")) is None


def test_config_from_command_line_and_env():
    args = parse_args(["--model-path", "m", "--tp", "8", "--ep", "8", "--moe-runner-backend", "marlin",
                       "--mem-fraction-static", "0.7", "--disable-cuda-graph", "--max-running-requests", "4"])
    cfg = sim_config_from(args, {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_DISABLE": "1"})
    assert cfg == SimConfig(tp_size=8, ep_size=8, moe_runner_backend="marlin", mem_fraction_static=0.7,
                            disable_cuda_graph=True, max_running_requests=4, nccl_proto="LL",
                            nccl_algo="Ring", nccl_p2p_disable="1")
    assert sim_config_from(argparse.Namespace(), {}) == SimConfig()


def test_unknown_flag_exits_2():
    with pytest.raises(SystemExit) as exc:
        parse_args(["--model-path", "m", "--no-such-flag"])
    assert exc.value.code == 2
