"""The trace parser on REAL torch profiler traces (a CPU model profiled here) and on the event
kinds a GPU trace has; the grouping rules on real kernel names."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from sweeper.profile.groups import GROUP_RULES, GROUPS, classify_kernel
from sweeper.profile.trace import (
    SOURCE_CPU, SOURCE_GPU, TraceError, device_busy, group_shares, kernel_shares, load_trace, summarize_traces,
)
from tests.support.paths import FIXTURE_DIR

FIXTURES = FIXTURE_DIR / "profile"
STEPS = 4


class TinyAttentionBlock(torch.nn.Module):
    def __init__(self, dim: int = 256):
        super().__init__()
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        heads = lambda t: t.view(t.shape[0], t.shape[1], 4, -1).transpose(1, 2)  # noqa: E731
        attended = F.scaled_dot_product_attention(heads(q), heads(k), heads(v))
        return self.out(attended.transpose(1, 2).reshape(x.shape))


# one worker runs this module: its module fixture is built once (xdist --dist loadgroup)
pytestmark = pytest.mark.xdist_group("profile_trace")


@pytest.fixture(scope="module")
def cpu_traces(tmp_path_factory) -> tuple[Path, Path]:
    """One real profile of a small CPU model, exported by torch as .pt.trace.json.gz (torch gzips
    by the name; a profile exports once) and unpacked to plain .json."""
    folder = tmp_path_factory.mktemp("torch")
    torch.manual_seed(0)
    model = TinyAttentionBlock().eval()
    x = torch.randn(8, 64, 256)
    with torch.no_grad():
        model(x)  # first-call set-up stays out of the profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(STEPS):
                model(x)
    plain, packed = folder / "cpu.json", folder / "host_1234.1790000000000.pt.trace.json.gz"
    prof.export_chrome_trace(str(packed))
    plain.write_bytes(gzip.decompress(packed.read_bytes()))
    return plain, packed


def root_time_by_thread(trace: dict) -> float:
    """Independent of the parser: the time covered by top-level CPU ops (interval union per thread)."""
    spans = defaultdict(list)
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            spans[(e["pid"], e["tid"])].append((float(e["ts"]), float(e["ts"]) + float(e["dur"])))
    total = 0.0
    for intervals in spans.values():
        end = float("-inf")
        for start, stop in sorted(intervals):
            if start >= end:
                total += stop - start
                end = stop
            elif stop > end:
                total += stop - end
                end = stop
    return total


def test_a_real_cpu_trace_is_measured_by_operator_self_time(cpu_traces):
    plain, packed = cpu_traces
    assert packed.read_bytes()[:2] == b"\x1f\x8b"  # torch really gzipped it
    trace = load_trace(plain)
    table = kernel_shares(trace)
    assert table.source == SOURCE_CPU and table.traces == 1 and table.devices == 0
    by_name = {row.name: row for row in table.rows}
    # Two Linear layers per step: their matmul is aten::addmm (aten::linear keeps only a sliver).
    assert by_name["aten::addmm"].calls == 2 * STEPS
    assert by_name["aten::addmm"].group == "moe_gemm"
    assert by_name["aten::linear"].total_us < by_name["aten::addmm"].total_us
    sdpa = by_name["aten::scaled_dot_product_attention"]
    assert sdpa.calls == STEPS and sdpa.group == "attention"
    # Self times add up to the time the top-level operators cover: nothing counted twice.
    assert table.total_us == pytest.approx(root_time_by_thread(trace), rel=1e-3)
    assert sum(row.share for row in table.rows) == pytest.approx(1.0)
    assert [row.total_us for row in table.rows] == sorted((row.total_us for row in table.rows), reverse=True)
    groups = group_shares(table)
    assert [g.total_us for g in groups] == sorted((g.total_us for g in groups), reverse=True)
    assert {g.group for g in groups} == set(GROUPS)
    assert sum(g.share for g in groups) == pytest.approx(1.0)
    gemm = next(g for g in groups if g.group == "moe_gemm")
    assert gemm.top_kernel == "aten::addmm" and gemm.calls >= 2 * STEPS
    attention = next(g for g in groups if g.group == "attention")
    assert attention.total_us > 0 and attention.calls >= STEPS


def test_the_gzipped_export_reads_the_same(cpu_traces):
    plain, packed = cpu_traces
    assert kernel_shares(load_trace(packed)).rows == kernel_shares(load_trace(plain)).rows


def gpu_trace(device: int) -> dict:
    """The event kinds of a torch CUDA trace (kineto's categories), with known durations."""
    kernel = lambda name, ts, dur: {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": 7,  # noqa: E731
                                    "ts": ts, "dur": dur, "args": {"device": device, "stream": 7}}
    return {"schemaVersion": 1, "traceEvents": [
        {"ph": "M", "name": "process_name", "pid": device, "tid": 0, "args": {"name": "python"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 99, "tid": 99, "ts": 0, "dur": 5000},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 99, "tid": 99, "ts": 1, "dur": 900},
        {"ph": "X", "cat": "python_function", "name": "model.py(10): forward", "pid": 99, "tid": 99, "ts": 0, "dur": 9000},
        kernel("flash_fwd_splitkv_kernel", 10, 600.0),
        kernel("flash_fwd_splitkv_kernel", 700, 600.0),
        kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 1400, 250.0),
        kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 1700, 100.0),
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": device, "tid": 8,
         "ts": 1800, "dur": 50.0, "args": {"device": device, "bytes": 64}},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": device, "tid": 8, "ts": 1900, "dur": 0.0},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 99, "tid": 99, "ts": 1},
        {"ph": "i", "name": "Iteration Start: PyTorch Profiler", "pid": 99, "tid": 99, "ts": 0},
    ]}


def test_gpu_traces_count_only_device_events_summed_over_ranks():
    table = kernel_shares([gpu_trace(0), gpu_trace(1)])
    assert table.source == SOURCE_GPU and table.traces == 2 and table.devices == 2
    assert table.total_us == pytest.approx(2 * (1200 + 250 + 100 + 50))
    rows = {row.name: row for row in table.rows}
    assert "aten::mm" not in rows and "cudaLaunchKernel" not in rows
    assert rows["flash_fwd_splitkv_kernel"].calls == 4
    assert rows["flash_fwd_splitkv_kernel"].share == pytest.approx(1200 / 1600)
    shares = {g.group: g.share for g in group_shares(table)}
    assert shares == pytest.approx({"attention": 0.75, "moe_gemm": 250 / 1600, "communication": 100 / 1600,
                                    "other": 50 / 1600})
    assert group_shares(table)[0].group == "attention"


def test_old_kineto_category_names_count_too():
    trace = {"traceEvents": [{"ph": "X", "cat": "Kernel", "name": "volta_sgemm_128x64_nn", "ts": 0, "dur": 3},
                             {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD", "ts": 4, "dur": 1}]}
    table = kernel_shares(trace)
    assert table.source == SOURCE_GPU and table.total_us == 4


@pytest.mark.parametrize("name, group", [
    ("_tiled_sparse_decode_kernel", "attention"),
    ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<...>", "attention"),
    ("flash_fwd_splitkv_kernel", "attention"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", "attention"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "attention"),
    ("void vllm::paged_attention_v2_kernel<...>", "attention"),
    ("void vllm::reshape_and_cache_flash_kernel<...>", "attention"),
    ("_fwd_kernel_stage1", "attention"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7", "attention"),
    ("fused_moe_kernel", "moe_gemm"),
    ("void marlin_moe_wna16::Marlin<...>", "moe_gemm"),
    ("void flashinfer::cutlass_fused_moe::...", "moe_gemm"),
    ("nvjet_tst_128x64_64x8_1x1_v_bz_coopB_TNT", "moe_gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "moe_gemm"),
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", "moe_gemm"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x1_tn_align8>", "moe_gemm"),
    ("void gemv2T_kernel_val<int, int, __nv_bfloat16, float, float, 128, 16, 4, 4, false, false>", "moe_gemm"),
    ("aten::addmm", "moe_gemm"),
    ("aten::mm", "moe_gemm"),
    ("aten::bmm", "moe_gemm"),
    ("triton_tem_fused_mm_0", "moe_gemm"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t", "communication"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>", "communication"),
    ("void deep_ep::internode::dispatch<...>", "communication"),
    ("void flashinfer::moe_a2a_dispatch_kernel<nv_bfloat16>", "communication"),
    ("Memcpy PtoP (Device -> Device)", "communication"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>", "other"),
    ("void flashinfer::norm::FusedAddRMSNormKernel<8, nv_bfloat16>", "other"),
    ("void vllm::act_and_mul_kernel<...>", "other"),
    ("Memcpy DtoH (Device -> Pinned)", "other"),
    ("aten::relu", "other"),
    ("aten::summary_stats", "other"),
])
def test_kernel_names_fall_in_their_groups(name, group):
    assert classify_kernel(name) == group


def test_every_rule_names_a_known_group_and_says_why():
    for group, pattern, why in GROUP_RULES:
        assert group in GROUPS and pattern and why


def test_not_a_trace_is_refused_with_the_file_named(tmp_path):
    junk = tmp_path / "junk.trace.json.gz"
    junk.write_bytes(gzip.compress(b"{not json"))
    with pytest.raises(TraceError, match="junk.trace.json.gz"):
        load_trace(junk)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"events": []}))
    with pytest.raises(TraceError, match="traceEvents"):
        load_trace(other)
    truncated = tmp_path / "cut.json.gz"
    truncated.write_bytes(gzip.compress(json.dumps({"traceEvents": []}).encode())[:-6])
    with pytest.raises(TraceError, match="cut.json.gz"):
        load_trace(truncated)


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("h200_*.json*")), ids=lambda p: p.name)
def test_a_real_h200_gpu_trace_parses(path):
    table = kernel_shares(load_trace(path))
    assert table.source == SOURCE_GPU and table.devices >= 1
    assert table.total_us > 0 and sum(row.share for row in table.rows) == pytest.approx(1.0)
    groups = {g.group: g for g in group_shares(table)}
    assert groups["moe_gemm"].total_us > 0  # any transformer forward runs GEMMs


def test_the_h200_probe_trace_in_detail():
    """A real kineto CUDA trace (see tests/fixtures/profile/README.md): 3 forward passes of 4 layers."""
    trace = load_trace(FIXTURES / "h200_llama4l_probe.pt.trace.json.gz")
    table = kernel_shares(trace)
    assert table.source == SOURCE_GPU and table.devices == 1 and table.traces == 1
    rows = {row.name: row for row in table.rows}
    sdpa = [row for row in table.rows if "sdpa" in row.name]
    assert len(sdpa) == 1 and sdpa[0].calls == 12 and sdpa[0].group == "attention"
    assert rows["nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN"].calls == 3  # the LM head, once a pass
    assert all(row.group == "moe_gemm" for row in table.rows if row.name.startswith("nvjet"))
    assert rows["Memset (Device)"].group == "other"
    # The CPU side (cpu_op, cuda_runtime, cuda_driver, python) is not GPU time.
    kernel_us = sum(e["dur"] for e in trace["traceEvents"] if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy"))
    assert table.total_us == pytest.approx(kernel_us, rel=1e-6)
    assert not any(name.startswith(("aten::", "cuda")) for name in rows)


def test_gpu_busy_counts_overlapping_streams_once():
    # device 0: kernels 10-610, 700-1300, 1400-1650, 1700-1800 on stream 7; memcpy 1800-1850 and an
    # empty memset at 1900 on stream 8
    (busy,) = device_busy(gpu_trace(0))
    assert busy.span_us == pytest.approx(1900 - 10)
    assert busy.busy_us == pytest.approx(600 + 600 + 250 + 100 + 50)
    overlapping = gpu_trace(1)
    overlapping["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "side", "pid": 1, "tid": 9,
                                       "ts": 500, "dur": 300, "args": {"device": 1}})  # 500-800 over 10-610
    (busy,) = device_busy(overlapping)
    assert busy.busy_us == pytest.approx((1300 - 10) + 250 + 100 + 50)  # 10-1300 is one busy stretch now
    assert [b.device for b in device_busy([gpu_trace(0), gpu_trace(1)])] == [0, 1]
    assert device_busy({"traceEvents": []}) == []


def test_traces_are_read_once_each_from_a_generator(cpu_traces):
    plain, _ = cpu_traces
    loaded = []

    def lazily():
        for trace in (load_trace(plain), gpu_trace(0), gpu_trace(1)):
            loaded.append(len(loaded))
            yield trace

    table, busy = summarize_traces(lazily())
    assert loaded == [0, 1, 2] and table.traces == 3
    # A CPU-only trace among GPU traces adds nothing: GPU time is what is measured.
    assert table.source == SOURCE_GPU and table.total_us == pytest.approx(2 * 1600)
    assert [(b.trace, b.device) for b in busy] == [(1, 0), (2, 1)]
