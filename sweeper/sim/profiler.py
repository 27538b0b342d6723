"""The simulator's torch profiler: /start_profile and /stop_profile as SGLang has them, writing a
chrome trace in torch profiler's format whose GPU kernels follow the performance model.

While profiling, the scheduler reports every forward pass (prefill or decode) with its wall span.
On stop, each TP rank gets `<id>-TP-<rank>.trace.json.gz` in the output folder (the request's
`output_dir`, else SGLANG_TORCH_PROFILER_DIR, else /tmp, as SGLang). A pass becomes kernels laid
end to end on stream 7 of that rank's GPU, in MODELLED time (a real GPU's microseconds, not the
time-scaled wall clock), with durations from `perf.step_breakdown_ms` / `prefill_time_ms` scaled
by the pass's own jitter:

- attention -> one attention kernel (name by backend: triton's `_tiled_sparse_decode_kernel`, the
  case study's 63% kernel), MoE -> one expert kernel (name by runner backend), dense -> a cuBLAS
  GEMM (DENSE_GEMM_FRACTION) and a norm/activation kernel (the rest), communication -> an NCCL
  all-reduce named with NCCL_ALGO/NCCL_PROTO, plus the EP dispatch (NCCL all-gather, or
  flashinfer's a2a kernel); the launch overhead is the idle gap before the next pass.
- the wall time between passes (client turnaround, idle) is kept as it is, not stretched by
  1/time_scale, so the GPU idles in the trace as it would on a real GPU.
- one kernel per part per pass, not per layer: the trace shows the model's split, not the real
  kernel count (which would make traces ~60x larger for nothing the parser needs).
- the CPU side has one cudaGraphLaunch per replayed pass (cudaLaunchKernel per kernel when eager)
  and an aten::copy_ of the sampled tokens, plus a small DtoH memcpy on the GPU.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from sweeper.sim.config import SimConfig
from sweeper.sim.perf import (
    PREFILL_PER_TOKEN_MS, attention_factor, moe_factor, prefill_time_ms,
    step_breakdown_ms, step_time_ms, uses_graph_at,
)

DENSE_GEMM_FRACTION = 0.8  # of the model's "dense" part: projections; the rest norms, rotary, activations
GPU_STREAM = 7
DTOH_COPY_US = 3.0
MAX_RECORDED_PASSES = 200_000
DEFAULT_OUTPUT_DIR = "/tmp"  # SGLang's default when SGLANG_TORCH_PROFILER_DIR is unset

ATTENTION_KERNELS = {
    "triton": "_tiled_sparse_decode_kernel",
    "flashinfer": "void flashinfer::BatchMLAPagedAttentionKernel<false, 512, 64>",
    "flex_attention": "triton_tem_fused_flex_attention_0",
    "torch_native": "fmha_cutlassF_bf16_aligned_64x64_rf_sm80",
}
PREFILL_ATTENTION_KERNEL = "_sparse_extend_attention_fwd_kernel"
MOE_KERNELS = {
    "marlin": "void marlin_moe_wna16::Marlin<nv_bfloat16, 4, 256, 8>",
    "flashinfer_mxfp4": "void flashinfer::trtllm_mxfp4_block_scale_moe_kernel<256>",
}
DEFAULT_MOE_KERNEL = "fused_moe_kernel"
GEMM_KERNEL = "nvjet_tst_128x64_64x8_1x1_v_bz_coopB_TNT"
NORM_KERNEL = "void flashinfer::norm::FusedAddRMSNormKernel<8, nv_bfloat16>"
A2A_KERNEL = "void flashinfer::moe_a2a_dispatch_kernel<nv_bfloat16>"
DTOH_COPY = "Memcpy DtoH (Device -> Pinned)"


def _nccl_choice(value: str | None, default: str) -> str:
    first = (value or "").split(",")[0].strip()
    return (first or default).upper()


def nccl_kernel(collective: str, cfg: SimConfig) -> str:
    op = "_Sum_bf16" if collective in ("AllReduce", "ReduceScatter") else ""
    return (f"ncclDevKernel_{collective}{op}_{_nccl_choice(cfg.nccl_algo, 'Ring')}_"
            f"{_nccl_choice(cfg.nccl_proto, 'LL')}(ncclDevKernelArgsStorage<4096ul>)")


def decode_kernels(cfg: SimConfig, batch: int) -> list[tuple[str, float]]:
    """(kernel name, ms) of one decode step at `batch`, in launch order; zero parts left out."""
    parts = step_breakdown_ms(cfg, batch)
    kernels = [
        (GEMM_KERNEL, parts["dense"] * DENSE_GEMM_FRACTION),
        (ATTENTION_KERNELS.get(cfg.effective_attention_backend, ATTENTION_KERNELS["triton"]), parts["attention"]),
        (NORM_KERNEL, parts["dense"] * (1.0 - DENSE_GEMM_FRACTION)),
        *_communication_kernels(cfg, batch, parts["communication"]),
        (MOE_KERNELS.get(cfg.effective_moe_runner_backend, DEFAULT_MOE_KERNEL), parts["moe"]),
    ]
    return [(name, ms) for name, ms in kernels if ms > 0]


def _communication_kernels(cfg: SimConfig, batch: int, total_ms: float) -> list[tuple[str, float]]:
    """The model's communication time split into the TP all-reduce and the EP dispatch."""
    if total_ms <= 0:
        return []
    if cfg.ep_size <= 1:
        return [(nccl_kernel("AllReduce", cfg), total_ms)]
    allreduce = step_breakdown_ms(replace(cfg, ep_size=1), batch)["communication"]  # the same without EP
    dispatch = A2A_KERNEL if cfg.moe_a2a_backend == "flashinfer" else nccl_kernel("AllGather", cfg)
    return [(nccl_kernel("AllReduce", cfg), allreduce), (dispatch, total_ms - allreduce)]


def prefill_kernels(cfg: SimConfig, n_tokens: int) -> list[tuple[str, float]]:
    """(kernel name, ms) of one prefill of `n_tokens`: the per-token part splits between attention
    and MoE as perf.prefill_time_ms weighs them; the per-pass part is GEMM and norms."""
    total = prefill_time_ms(cfg, n_tokens)
    per_token = max(int(n_tokens), 1) * PREFILL_PER_TOKEN_MS
    attention = per_token * 0.6 * attention_factor(cfg)
    moe = per_token * 0.4 * moe_factor(cfg)
    fixed = total - attention - moe  # passes * PREFILL_PASS_MS
    return [(GEMM_KERNEL, fixed * DENSE_GEMM_FRACTION), (PREFILL_ATTENTION_KERNEL, attention),
            (NORM_KERNEL, fixed * (1.0 - DENSE_GEMM_FRACTION)),
            (MOE_KERNELS.get(cfg.effective_moe_runner_backend, DEFAULT_MOE_KERNEL), moe)]


@dataclass(frozen=True)
class Pass:
    kind: str  # prefill | decode
    start: float  # loop time (wall s)
    end: float
    size: int  # decode: batch; prefill: new tokens
    batch: int  # requests in the pass


def pass_kernels(cfg: SimConfig, item: Pass, time_scale: float) -> tuple[list[tuple[str, float]], float]:
    """The pass's kernels with durations (us) scaled to its modelled span, and that span (us)."""
    span_us = max(item.end - item.start, 0.0) / time_scale * 1e6
    if item.kind == "decode":
        kernels, modelled_ms = decode_kernels(cfg, item.size), step_time_ms(cfg, item.size)
    else:
        kernels, modelled_ms = prefill_kernels(cfg, item.size), prefill_time_ms(cfg, item.size)
    factor = span_us / (modelled_ms * 1000.0) if modelled_ms > 0 else 0.0
    return [(name, ms * 1000.0 * factor) for name, ms in kernels], span_us


def build_chrome_trace(cfg: SimConfig, passes: Sequence[Pass], time_scale: float, rank: int,
                       origin: float, origin_epoch_us: float, activities: Sequence[str], pid: int) -> dict[str, Any]:
    """One TP rank's trace, in the layout torch.profiler's export_chrome_trace writes."""
    gpu, cpu = "GPU" in activities, "CPU" in activities
    events = _metadata_events(rank, pid, gpu)
    correlation = 1000 * rank
    clock_us, last_end = origin_epoch_us, origin
    for item in passes:
        # Passes run in modelled time; the wall time between them (client turnaround, an idle
        # server) is real time and is not stretched by 1/time_scale.
        start_us = clock_us + max(item.start - last_end, 0.0) * 1e6
        kernels, span_us = pass_kernels(cfg, item, time_scale)
        clock_us, last_end = start_us + span_us, item.end
        graph = item.kind == "decode" and uses_graph_at(cfg, item.size)
        cursor = start_us
        if cpu and graph:
            correlation += 1
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": pid, "tid": pid,
                           "ts": round(start_us, 3), "dur": 15.0, "args": {"correlation": correlation}})
        for name, dur in kernels:
            correlation += 1
            if cpu and not graph:
                events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid,
                               "tid": pid, "ts": round(cursor, 3), "dur": 4.0, "args": {"correlation": correlation}})
            if gpu:
                events.append({"ph": "X", "cat": "kernel", "name": name, "pid": rank, "tid": GPU_STREAM,
                               "ts": round(cursor, 3), "dur": round(dur, 3),
                               "args": {"device": rank, "stream": GPU_STREAM, "correlation": correlation,
                                        "grid": [132, 1, 1], "block": [128, 1, 1]}})
            cursor += dur
        if gpu:
            events.append({"ph": "X", "cat": "gpu_memcpy", "name": DTOH_COPY, "pid": rank, "tid": GPU_STREAM,
                           "ts": round(cursor, 3), "dur": DTOH_COPY_US,
                           "args": {"device": rank, "stream": GPU_STREAM, "bytes": 4 * item.batch}})
        if cpu:
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": pid, "tid": pid,
                           "ts": round(start_us + span_us * 0.9, 3), "dur": 12.0,
                           "args": {"External id": correlation}})
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": r, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition (simulated)",
                              "totalGlobalMem": int(cfg.gpu_memory_gb * 2**30), "computeMajor": 12,
                              "computeMinor": 0} for r in ([rank] if gpu else [])],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": cfg.tp_size},
        "traceName": f"TP-{rank}",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": int(origin_epoch_us * 1000),
        "traceEvents": events,
    }


def _metadata_events(rank: int, pid: int, gpu: bool) -> list[dict[str, Any]]:
    """The trace's process and thread names: the scheduler's CPU thread, and with GPU activity the
    rank's GPU (pid = rank) and its stream."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": "CPU"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": pid,
         "args": {"name": f"thread {pid} (scheduler_TP{rank})"}},
    ]
    if gpu:
        events += [
            {"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "process_labels", "pid": rank, "tid": 0, "args": {"labels": f"GPU {rank}"}},
            {"ph": "M", "name": "thread_name", "pid": rank, "tid": GPU_STREAM,
             "args": {"name": f"stream {GPU_STREAM}"}},
        ]
    return events


class ProfilerError(ValueError):
    """A profiler request SGLang would refuse (answered 400 with this message)."""


class SimProfiler:
    """Start/stop state and the passes recorded in between (called from the scheduler's task)."""

    def __init__(self, cfg: SimConfig, time_scale: float) -> None:
        self._cfg, self._scale = cfg, time_scale
        self._passes: list[Pass] | None = None
        self._origin = 0.0
        self._origin_epoch_us = 0.0
        self._output_dir = ""
        self._activities: tuple[str, ...] = ()

    @property
    def output_dir(self) -> str:
        return self._output_dir

    @property
    def active(self) -> bool:
        return self._passes is not None

    def start(self, body: dict[str, Any], env: dict[str, str], loop_time: float) -> None:
        if self.active:
            raise ProfilerError("Profiling is already in progress. Call /stop_profile first.")
        if body.get("num_steps") is not None:
            raise ProfilerError("num_steps is not simulated: stop the profile with /stop_profile")
        activities = body.get("activities") or ["CPU", "GPU"]
        if not isinstance(activities, list) or not set(activities) <= {"CPU", "GPU", "MEM", "CUDA_PROFILER"}:
            raise ProfilerError(f"activities must be a list of CPU, GPU, got {activities!r}")
        self._output_dir = body.get("output_dir") or env.get("SGLANG_TORCH_PROFILER_DIR") or DEFAULT_OUTPUT_DIR
        self._activities = tuple(activities)
        self._origin, self._origin_epoch_us = loop_time, time.time() * 1e6
        self._passes = []

    def record(self, kind: str, start: float, end: float, size: int, batch: int) -> None:
        """A finished pass; one that began before /start_profile is not in the trace (torch
        records the kernels launched while it runs)."""
        if self._passes is not None and start >= self._origin and len(self._passes) < MAX_RECORDED_PASSES:
            self._passes.append(Pass(kind, start, end, size, batch))

    def stop(self) -> tuple[list[Pass], str, tuple[str, ...], float, float]:
        if self._passes is None:
            raise ProfilerError("Profiling is not in progress. Call /start_profile first.")
        passes, self._passes = self._passes, None
        return passes, self._output_dir, self._activities, self._origin, self._origin_epoch_us

    def write(self, passes: Sequence[Pass], output_dir: str, activities: Sequence[str], origin: float,
              origin_epoch_us: float) -> list[Path]:
        """One gzipped trace per TP rank, each written whole under a temporary name, then renamed."""
        folder = Path(output_dir)
        folder.mkdir(parents=True, exist_ok=True)
        profile_id = f"{time.time():.6f}"
        written = []
        for rank in range(max(self._cfg.tp_size, 1)):
            trace = build_chrome_trace(self._cfg, passes, self._scale, rank, origin, origin_epoch_us,
                                       activities, os.getpid())
            path = folder / f"{profile_id}-TP-{rank}.trace.json.gz"
            partial = folder / f".{path.name}.tmp"
            partial.write_bytes(gzip.compress(json.dumps(trace).encode(), compresslevel=5))
            partial.replace(path)
            written.append(path)
        return written
