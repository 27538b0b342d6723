"""The simulator's traces: torch's format, read back by the parser, in the performance model's split."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sweeper.profile.trace import SOURCE_CPU, SOURCE_GPU, device_busy, group_shares, kernel_shares
from sweeper.sim.perf import BASELINE, OPTIMUM, prefill_time_ms, step_breakdown_ms, step_time_ms
from sweeper.sim.profiler import (
    DENSE_GEMM_FRACTION, Pass, build_chrome_trace, decode_kernels, nccl_kernel, prefill_kernels,
)

SCALE = 0.02


def lockstep_round(cfg, batch: int, input_len: int, output_len: int, start: float = 0.0) -> list[Pass]:
    """One closed-loop round as the scheduler runs it, with exactly the modelled durations."""
    passes, t = [], start
    prefill = prefill_time_ms(cfg, batch * input_len) / 1000 * SCALE
    passes.append(Pass("prefill", t, t + prefill, batch * input_len, batch))
    t += prefill
    for _ in range(output_len - 1):
        step = step_time_ms(cfg, batch) / 1000 * SCALE
        passes.append(Pass("decode", t, t + step, batch, batch))
        t += step
    return passes


def decode_split(cfg, batch: int) -> dict[str, float]:
    """The model's decode step in the four groups (launch overhead is idle GPU time)."""
    p = step_breakdown_ms(cfg, batch)
    split = {"attention": p["attention"], "moe_gemm": p["moe"] + DENSE_GEMM_FRACTION * p["dense"],
             "communication": p["communication"], "other": (1 - DENSE_GEMM_FRACTION) * p["dense"]}
    total = sum(split.values())
    return {group: ms / total for group, ms in split.items()}


EAGER_TORCH_NATIVE = replace(OPTIMUM, attention_backend="torch_native", disable_cuda_graph=True,
                             moe_a2a_backend="flashinfer", nccl_algo="Tree", nccl_proto="LL128")


@pytest.mark.parametrize("cfg, batch", [(BASELINE, 16), (BASELINE, 1), (EAGER_TORCH_NATIVE, 8)])
def test_decode_trace_shares_are_the_models_split(cfg, batch):
    passes = [Pass("decode", i * 0.01, i * 0.01 + step_time_ms(cfg, batch) / 1000 * SCALE, batch, batch)
              for i in range(20)]
    trace = build_chrome_trace(cfg, passes, SCALE, rank=0, origin=0.0, origin_epoch_us=1.7e15,
                               activities=["CPU", "GPU"], pid=4242)
    table = kernel_shares(trace)
    assert table.source == SOURCE_GPU and table.devices == 1
    shares = {g.group: g.share for g in group_shares(table)}
    assert shares == pytest.approx(decode_split(cfg, batch), abs=1e-4)  # the memcpy is a few us in 20 s


def test_baseline_attention_is_the_case_studys_63_percent():
    table = kernel_shares(build_chrome_trace(BASELINE, lockstep_round(BASELINE, 16, 128, 32), SCALE, 0, 0.0,
                                             1.7e15, ["CPU", "GPU"], 1))
    top = table.rows[0]
    assert top.name == "_tiled_sparse_decode_kernel" and top.group == "attention"
    assert top.calls == 31
    # 441 ms of a 700 ms step (63%); of GPU kernel time (the 1 ms launch gap excluded) slightly more.
    assert 0.61 < top.share < 0.64


def test_kernels_of_a_pass_add_up_to_the_model():
    for cfg in (BASELINE, OPTIMUM, EAGER_TORCH_NATIVE):
        for batch in (1, 4, 16):
            parts = step_breakdown_ms(cfg, batch)
            assert sum(ms for _, ms in decode_kernels(cfg, batch)) == pytest.approx(
                step_time_ms(cfg, batch) - parts["launch_overhead"])
        assert sum(ms for _, ms in prefill_kernels(cfg, 2048)) == pytest.approx(prefill_time_ms(cfg, 2048))


def test_kernel_names_follow_the_config():
    names = [name for name, _ in decode_kernels(EAGER_TORCH_NATIVE, 4)]
    assert "fmha_cutlassF_bf16_aligned_64x64_rf_sm80" in names
    assert nccl_kernel("AllReduce", EAGER_TORCH_NATIVE) in names
    assert "TREE_LL128" in nccl_kernel("AllReduce", EAGER_TORCH_NATIVE)
    assert any("moe_a2a_dispatch" in name for name in names)  # EP with flashinfer's all-to-all
    single = [name for name, _ in decode_kernels(replace(BASELINE, tp_size=1), 4)]
    assert not any("nccl" in name.lower() for name in single)  # tp=1: nothing to all-reduce


def test_eager_passes_launch_each_kernel_and_graphs_launch_once():
    eager = build_chrome_trace(EAGER_TORCH_NATIVE, lockstep_round(EAGER_TORCH_NATIVE, 2, 16, 4), SCALE, 0, 0.0,
                               0.0, ["CPU", "GPU"], 1)
    graphs = build_chrome_trace(BASELINE, lockstep_round(BASELINE, 2, 16, 4), SCALE, 0, 0.0, 0.0, ["CPU", "GPU"], 1)
    runtime = lambda trace, name: sum(e.get("name") == name for e in trace["traceEvents"])  # noqa: E731
    assert runtime(graphs, "cudaGraphLaunch") == 3 and runtime(graphs, "cudaLaunchKernel") == 4  # prefill is eager
    assert runtime(eager, "cudaGraphLaunch") == 0 and runtime(eager, "cudaLaunchKernel") > 3 * 5


def test_cpu_only_activity_gives_a_trace_without_gpu_events():
    trace = build_chrome_trace(BASELINE, lockstep_round(BASELINE, 2, 16, 4), SCALE, 0, 0.0, 0.0, ["CPU"], 1)
    assert kernel_shares(trace).source == SOURCE_CPU


def test_the_gpu_idles_for_the_launch_overhead_and_real_gaps_only():
    step_s = step_time_ms(BASELINE, 16) / 1000 * SCALE
    passes = [Pass("decode", i * step_s, (i + 1) * step_s, 16, 16) for i in range(10)]
    passes += [Pass("decode", 10 * step_s + 0.005 + i * step_s, 10 * step_s + 0.005 + (i + 1) * step_s, 16, 16)
               for i in range(10)]  # after 5 wall ms of client turnaround: 5 ms, not 5 ms / SCALE
    (busy,) = device_busy(build_chrome_trace(BASELINE, passes, SCALE, 0, 0.0, 0.0, ["GPU"], 1))
    step_us = step_time_ms(BASELINE, 16) * 1000
    kernels_us = step_us - 1000.0  # the 1 ms launch overhead of a graph replay is idle
    assert busy.busy_us == pytest.approx(20 * kernels_us + 20 * 3.0, rel=1e-6)  # + the token copies
    assert busy.span_us == pytest.approx(20 * step_us + 5000 - 1000 + 3.0, rel=1e-6)
