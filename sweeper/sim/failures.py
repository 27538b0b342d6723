"""Which configs the simulated server cannot run, how they fail, and what they log.

Pure: `failure_of(cfg)` returns a `SimFailure` (or None) whose records carry the real SGLang
failure substrings from engines.md, so a controller's log classifier can be tested against them.
Checks run in the order a real launch would hit them: argument checks in the main process,
backend/architecture asserts while the schedulers start, NCCL init (hang), weight load and memory
pool, CUDA graph capture, and finally wrong-but-serving outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

from sweeper.sim.config import SimConfig

# Memory model (GB per GPU). DeepSeek-V4-Flash with FP4 experts is ~160 GB on disk; TP and EP
# both split it evenly over tp_size GPUs (EP splits experts inside the TP group).
WEIGHTS_GB = 160.0
MIN_KV_CACHE_GB = 4.0
# Memory outside the static pool needed at run time: CUDA context, activations, NCCL buffers.
RUNTIME_RESERVE_GB = 9.0
# CUDA graphs keep per-batch-size workspaces outside the static pool.
CUDA_GRAPH_GB_PER_BS = 0.008
ATTENTION_HEADS = 64

FP4_CAPABLE_MOE_BACKENDS = frozenset({"auto", "marlin", "flashinfer_mxfp4"})
SM120_UNSUPPORTED_ATTENTION = frozenset({"fa3", "fa4", "flashmla", "trtllm_mla", "cutlass_mla"})

_SGL = "/usr/local/lib/python3.12/dist-packages/sglang"
_SIGQUIT = "Received sigquit from a child process. It usually means the child failed."


@dataclass(frozen=True)
class SimFailure:
    """How a config fails. Each log record may span lines (a traceback is one record)."""

    kind: str
    phase: str
    log_lines: tuple[str, ...]
    # How far through its phase (weight load or graph capture) the failure strikes, 0..1.
    at_fraction: float = 1.0


# ---- memory arithmetic (also used for the cosmetic numbers in the boot log) -------------------

def weights_per_gpu_gb(cfg: SimConfig) -> float:
    return WEIGHTS_GB / max(cfg.tp_size, 1)


def static_pool_gb(cfg: SimConfig) -> float:
    return cfg.effective_mem_fraction * cfg.gpu_memory_gb


def kv_cache_gb(cfg: SimConfig) -> float:
    return static_pool_gb(cfg) - weights_per_gpu_gb(cfg)


def cuda_graph_workspace_gb(cfg: SimConfig) -> float:
    return CUDA_GRAPH_GB_PER_BS * cfg.effective_cuda_graph_max_bs if cfg.uses_cuda_graphs else 0.0


def headroom_gb(cfg: SimConfig) -> float:
    """GPU memory left outside the static pool."""
    return cfg.gpu_memory_gb - static_pool_gb(cfg)


# ---- log records -----------------------------------------------------------------------------

def _traceback(frames: tuple[tuple[str, int, str, str], ...], error: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        lines.append(f'  File "{_SGL}/{path}", line {line}, in {func}')
        lines.append(f"    {code}")
    lines.append(error)
    return "\n".join(lines)


def _scheduler_crash(frames: tuple[tuple[str, int, str, str], ...], error: str) -> tuple[str, ...]:
    """A scheduler child dies: its traceback, then the parent's sigquit line (SGLang's order)."""
    return ("Scheduler hit an exception: " + _traceback(frames, error), _SIGQUIT)


_SCHEDULER_INIT = ("srt/managers/scheduler.py", 3046, "run_scheduler_process",
                   "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)")
_MODEL_RUNNER_INIT = ("srt/model_executor/model_runner.py", 402, "initialize",
                      "self.init_attention_backend()")
_LAUNCH = ("launch_server.py", 14, "<module>", "server_args = prepare_server_args(sys.argv[1:])")
_CHECK_ARGS = ("srt/server_args.py", 1917, "check_server_args", "assert self.tp_size % self.ep_size == 0")


def _main_process_assert(message: str) -> tuple[str, ...]:
    return (_traceback((_LAUNCH, _CHECK_ARGS), f"AssertionError: {message}"),)


# ---- the checks, in launch order ---------------------------------------------------------------

def _invalid_argument(cfg: SimConfig) -> SimFailure | None:
    problems = []
    if not 0.0 < cfg.effective_mem_fraction < 1.0:
        problems.append(f"mem_fraction_static must be in (0, 1), got {cfg.effective_mem_fraction}")
    if cfg.effective_cuda_graph_max_bs < 1:
        problems.append(f"cuda_graph_max_bs must be positive, got {cfg.effective_cuda_graph_max_bs}")
    if cfg.effective_max_running < 1:
        problems.append(f"max_running_requests must be positive, got {cfg.effective_max_running}")
    chunk = cfg.effective_prefill_chunk
    if chunk is not None and chunk < 1:
        problems.append(f"chunked_prefill_size must be positive or -1, got {chunk}")
    if not problems:
        return None
    return SimFailure("invalid_argument", "startup", _main_process_assert(problems[0]))


def _invalid_parallel(cfg: SimConfig) -> SimFailure | None:
    tp, ep = cfg.tp_size, cfg.ep_size
    if tp < 1 or ep < 1:
        message = f"tp_size ({tp}) and ep_size ({ep}) must be positive"
    elif tp > cfg.gpus:
        message = f"tp_size ({tp}) must be <= the number of visible GPUs ({cfg.gpus})"
    elif ep > tp or tp % ep != 0:
        message = f"tp_size ({tp}) must be divisible by ep_size ({ep})"
    elif ATTENTION_HEADS % tp != 0:
        message = f"num_attention_heads ({ATTENTION_HEADS}) must be divisible by tp_size ({tp})"
    else:
        return None
    return SimFailure("invalid_parallel", "startup", _main_process_assert(message))


def _unsupported(cfg: SimConfig) -> SimFailure | None:
    attention = cfg.effective_attention_backend
    if attention in SM120_UNSUPPORTED_ATTENTION:
        frames = (_SCHEDULER_INIT, _MODEL_RUNNER_INIT,
                  ("srt/layers/attention/attention_registry.py", 188, f"create_{attention}_backend",
                   "assert is_sm90_supported() or is_sm100_supported(), ("))
        error = (f"AssertionError: {attention} attention backend is only supported on sm_90/sm_100 "
                 f"(this GPU is sm_120)")
        return SimFailure("unsupported", "startup", _scheduler_crash(frames, error))
    if cfg.moe_a2a_backend == "deepep":
        frames = (_SCHEDULER_INIT,
                  ("srt/layers/moe/token_dispatcher/deepep.py", 141, "get_deepep_buffer",
                   "cls._buffer = Buffer(group, num_nvl_bytes, num_rdma_bytes, low_latency_mode=True)"),
                  ("../deep_ep/buffer.py", 88, "__init__", "assert check_nvlink_connections(group)"))
        error = ("AssertionError: DeepEP low-latency mode is only supported on sm_90/sm_100 "
                 "with NVLink or IBGDA (this GPU is sm_120, PCIe only)")
        return SimFailure("unsupported", "startup", _scheduler_crash(frames, error))
    if cfg.moe_a2a_backend == "flashinfer" and cfg.ep_size <= 1:
        frames = (_SCHEDULER_INIT,
                  ("srt/layers/moe/token_dispatcher/flashinfer.py", 77, "__init__",
                   "assert self.ep_size > 1 and self.attn_dp_size == self.tp_size"))
        error = ("AssertionError: the flashinfer a2a backend is only supported on expert-parallel runs "
                 f"(ep_size > 1), got ep_size={cfg.ep_size}")
        return SimFailure("unsupported", "startup", _scheduler_crash(frames, error))
    return None


def _hang(cfg: SimConfig) -> SimFailure | None:
    # PCIe P2P between these RTX PRO 6000 cards hangs NCCL's first collective.
    if cfg.nccl_p2p_disable == "0" and cfg.tp_size >= 4:
        return SimFailure("hang", "hang", ("Init torch distributed begin.",))
    return None


def _oom_record(cfg: SimConfig, frames: tuple[tuple[str, int, str, str], ...], need_gb: float) -> str:
    free_gb = max(headroom_gb(cfg) - RUNTIME_RESERVE_GB + cuda_graph_workspace_gb(cfg) * 0.3, 0.05)
    error = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {need_gb:.2f} GiB. "
             f"GPU 0 has a total capacity of {cfg.gpu_memory_gb - 1.03:.2f} GiB of which "
             f"{free_gb * 1024:.2f} MiB is free. Including non-PyTorch memory, this process has "
             f"{cfg.gpu_memory_gb - 1.03 - free_gb:.2f} GiB memory in use.")
    return "Scheduler hit an exception: " + _traceback(frames, error)


def _memory(cfg: SimConfig) -> SimFailure | None:
    if kv_cache_gb(cfg) < MIN_KV_CACHE_GB:
        # Weights that do not even fit fail part-way through the load; the rest when the KV pool is sized.
        at = min(1.0, static_pool_gb(cfg) / weights_per_gpu_gb(cfg))
        frames = (_SCHEDULER_INIT,
                  ("srt/model_executor/model_runner.py", 1690, "init_memory_pool",
                   "raise RuntimeError("))
        error = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
        return SimFailure("not_enough_memory", "load", _scheduler_crash(frames, error), at_fraction=at)
    if headroom_gb(cfg) < RUNTIME_RESERVE_GB:
        frames = (_SCHEDULER_INIT,
                  ("srt/model_executor/model_runner.py", 1735, "init_memory_pool",
                   "self.token_to_kv_pool = self._build_kv_pool()"))
        record = _oom_record(cfg, frames, RUNTIME_RESERVE_GB - headroom_gb(cfg) + 0.5)
        return SimFailure("oom", "load", (record, _SIGQUIT))
    if headroom_gb(cfg) < RUNTIME_RESERVE_GB + cuda_graph_workspace_gb(cfg):
        # Largest batch sizes are captured first, so the OOM comes early in the capture.
        frames = (_SCHEDULER_INIT,
                  ("srt/model_executor/cuda_graph_runner.py", 512, "capture",
                   "graph, output_buffers = self.capture_one_batch_size(bs, forward)"))
        record = _oom_record(cfg, frames, cuda_graph_workspace_gb(cfg) * 0.25 + 0.25)
        return SimFailure("oom", "capture", (record, _SIGQUIT), at_fraction=0.2)
    return None


_CAPTURE_HINT = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose"
)


def _capture(cfg: SimConfig) -> SimFailure | None:
    if cfg.moe_a2a_backend == "flashinfer" and cfg.uses_cuda_graphs:
        frames = (_SCHEDULER_INIT,
                  ("srt/model_executor/cuda_graph_runner.py", 421, "__init__",
                   "raise Exception("))
        error = ("Exception: Capture cuda graph failed: CUDA error: operation not permitted when "
                 "stream is capturing (flashinfer all-to-all dispatch)\n" + _CAPTURE_HINT)
        return SimFailure("cuda_graph_capture", "capture", _scheduler_crash(frames, error), at_fraction=0.05)
    return None


def _garbage(cfg: SimConfig) -> SimFailure | None:
    backend = cfg.moe_runner_backend
    if backend in FP4_CAPABLE_MOE_BACKENDS:
        return None
    # The FP4-packed experts fall through to Fp8MoEMethod: loads fine, generates nonsense.
    return SimFailure("garbage_output", "garbage",
                      (f"Using Fp8MoEMethod for MoE layers (moe_runner_backend={backend})",))


_CHECKS = (_invalid_argument, _invalid_parallel, _unsupported, _hang, _memory, _capture, _garbage)


def failure_of(cfg: SimConfig) -> SimFailure | None:
    """The first failure a launch of `cfg` would hit, or None when it serves correct output."""
    for check in _CHECKS:
        failure = check(cfg)
        if failure is not None:
            return failure
    return None


def serves_requests(cfg: SimConfig) -> bool:
    """True when the server answers completions (correctly, or with garbage)."""
    failure = failure_of(cfg)
    return failure is None or failure.phase == "garbage"
