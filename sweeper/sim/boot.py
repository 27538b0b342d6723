"""Start-up sequence of the simulated server, up to the point where SGLang opens its HTTP port.

Logs what SGLang logs (server_args, distributed init, weight load with tqdm progress, memory pool,
CUDA graph capture) over modelled durations scaled by --time-scale, and plays the config's
failure at the phase it belongs to. Progress lines come at least every PROGRESS_EVERY_S of wall
time while loading or capturing, so a watchdog can tell slow from stuck.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import subprocess
from dataclasses import dataclass
from typing import Callable

from sweeper.sim.config import SimConfig, visible_gpus
from sweeper.sim.failures import (
    SimFailure, cuda_graph_workspace_gb, headroom_gb, kv_cache_gb, weights_per_gpu_gb,
)
from sweeper.sim.gpumem import held_mib, record_gpu_memory
from sweeper.sim.logs import SimLog, progress_bar
from sweeper.sim.procs import spawn_scheduler_children

PROGRESS_EVERY_S = 0.5
WEIGHT_SHARDS = 46
KV_BYTES_PER_TOKEN = 70_000
CONTEXT_LEN = 1_048_576
MAX_PREFILL_TOKENS = 16_384


@dataclass(frozen=True)
class ModelledSeconds:
    """Modelled durations of the start-up phases (weight load comes from --load-seconds)."""

    startup_crash: float = 5.0
    init_distributed: float = 3.0
    memory_pool: float = 2.0
    capture_per_graph: float = 1.0
    warmup_jit: float = 8.0  # first forward JIT-compiles the Triton fallbacks


TIMES = ModelledSeconds()


class BootFailed(Exception):
    def __init__(self, exit_code: int) -> None:
        super().__init__(f"boot failed with exit code {exit_code}")
        self.exit_code = exit_code


def cuda_graph_batch_sizes(max_bs: int) -> list[int]:
    """SGLang's capture list: 1, 2, 4, 8, 12, then every 8 up to max_bs."""
    sizes = [bs for bs in (1, 2, 4, 8, 12) if bs <= max_bs]
    sizes += list(range(16, max_bs + 1, 8))
    if not sizes or sizes[-1] != max_bs:
        sizes.append(max_bs)
    return sizes


def server_args_line(args: argparse.Namespace) -> str:
    fields = ", ".join(f"{name}={value!r}" for name, value in sorted(vars(args).items()))
    return f"server_args=ServerArgs({fields})"


class Boot:
    def __init__(self, args: argparse.Namespace, cfg: SimConfig, failure: SimFailure | None, log: SimLog) -> None:
        self._args = args
        self._cfg = cfg
        self._failure = failure
        self._log = log
        self._scale = args.time_scale

    async def sleep(self, modelled_s: float) -> None:
        await asyncio.sleep(modelled_s * self._scale)

    def _fails_in(self, phase: str) -> bool:
        return self._failure is not None and self._failure.phase == phase

    def _crash(self) -> BootFailed:
        assert self._failure is not None
        for record in self._failure.log_lines:
            self._log.record(record)
        return BootFailed(1)

    async def run(self, children: list[subprocess.Popen]) -> None:
        """Everything before the HTTP port opens; appends the spawned children to `children`."""
        cfg = self._cfg
        self._log.info(server_args_line(self._args))
        if self._fails_in("startup"):
            await asyncio.sleep(min(1.0, TIMES.startup_crash * self._scale))
            raise self._crash()

        children.extend(spawn_scheduler_children(cfg.tp_size))
        devices = visible_gpus(os.environ) or list(range(len(children)))
        for rank, child in enumerate(children):  # "GPU memory" for the nvidia-smi stand-in
            record_gpu_memory(child.pid, devices[rank], held_mib(cfg.effective_mem_fraction))
        for rank in range(cfg.tp_size):
            self._log.info("Init torch distributed begin.", rank=rank)
        if self._fails_in("hang"):
            await asyncio.Event().wait()  # NCCL never finishes its first collective; port stays closed
        await self.sleep(TIMES.init_distributed)
        self._log.info("Init torch distributed ends. mem usage=0.53 GB", rank=0)
        if self._fails_in("garbage"):
            for record in self._failure.log_lines:
                self._log.info(record, rank=0)

        await self._load_weights()
        await self._memory_pool()
        if cfg.uses_cuda_graphs:
            await self._capture_graphs()
        self._log.info(
            f"max_total_num_tokens={self._kv_tokens()}, chunked_prefill_size={cfg.effective_prefill_chunk or -1}, "
            f"max_prefill_tokens={MAX_PREFILL_TOKENS}, max_running_requests={cfg.effective_max_running}, "
            f"context_len={CONTEXT_LEN}, available_gpu_mem={self._free_after_pool_gb():.2f} GB", rank=0)

    # ---- phases ----

    async def _progress(self, modelled_s: float, units: int, stop_at: float,
                        render: Callable[[int, float], str]) -> None:
        """Sleep through a phase of `units`, logging progress at least every PROGRESS_EVERY_S wall."""
        wall_s = modelled_s * self._scale
        ticks = max(units, math.ceil(wall_s / PROGRESS_EVERY_S))
        stop_tick = math.floor(ticks * stop_at)
        for tick in range(1, stop_tick + 1):
            await asyncio.sleep(wall_s / ticks)
            self._log.raw(render(units * tick // ticks, modelled_s * tick / ticks))
        if stop_at < 1.0:  # the failure strikes part-way through the next tick
            await asyncio.sleep(wall_s * stop_at - stop_tick * wall_s / ticks)

    async def _load_weights(self) -> None:
        cfg = self._cfg
        weights = weights_per_gpu_gb(cfg)
        self._log.info(f"Load weight begin. avail mem={cfg.gpu_memory_gb - 1.03:.2f} GB", rank=0)
        stop_at = self._failure.at_fraction if self._fails_in("load") else 1.0
        await self._progress(
            self._args.load_seconds, WEIGHT_SHARDS, stop_at,
            lambda done, elapsed: progress_bar("Loading safetensors checkpoint shards", done, WEIGHT_SHARDS, elapsed))
        if stop_at < 1.0:
            raise self._crash()
        self._log.info(
            f"Load weight end. type=DeepseekV4ForCausalLM, dtype=torch.bfloat16, "
            f"avail mem={cfg.gpu_memory_gb - 1.03 - weights:.2f} GB, mem usage={weights:.2f} GB.", rank=0)

    async def _memory_pool(self) -> None:
        await self.sleep(TIMES.memory_pool)
        if self._fails_in("load"):
            raise self._crash()
        self._log.info(f"KV Cache is allocated. #tokens: {self._kv_tokens()}, KV size: {kv_cache_gb(self._cfg):.2f} GB",
                       rank=0)
        self._log.info(f"Memory pool end. avail mem={self._free_after_pool_gb():.2f} GB", rank=0)

    async def _capture_graphs(self) -> None:
        sizes = cuda_graph_batch_sizes(self._cfg.effective_cuda_graph_max_bs)
        largest_first = list(reversed(sizes))
        self._log.info(f"Capture cuda graph begin. This can take up to several minutes. "
                       f"avail mem={self._free_after_pool_gb():.2f} GB", rank=0)
        stop_at = self._failure.at_fraction if self._fails_in("capture") else 1.0
        modelled_s = TIMES.capture_per_graph * len(sizes)
        free = self._free_after_pool_gb()

        def render(done: int, elapsed: float) -> str:
            bs = largest_first[min(done, len(sizes) - 1)]
            return progress_bar(f"Capturing batches (bs={bs} avail_mem={free:.2f} GB)", done, len(sizes), elapsed)

        await self._progress(modelled_s, len(sizes), stop_at, render)
        if stop_at < 1.0:
            raise self._crash()
        self._log.info(
            f"Capture cuda graph end. Time elapsed: {modelled_s:.2f} s. "
            f"mem usage={cuda_graph_workspace_gb(self._cfg):.2f} GB. "
            f"avail mem={free - cuda_graph_workspace_gb(self._cfg):.2f} GB.", rank=0)

    # ---- cosmetic numbers ----

    def _kv_tokens(self) -> int:
        return max(int(kv_cache_gb(self._cfg) * 1e9 / KV_BYTES_PER_TOKEN), 0)

    def _free_after_pool_gb(self) -> float:
        return max(headroom_gb(self._cfg) - 1.03, 0.0)
