"""What the simulated server is asked to run: SGLang flags + NCCL env as one frozen value.

`SimConfig` keeps the raw flag values (None = "auto", as SGLang's argparse leaves them); the
`effective_*` properties resolve them the way SGLang 0.5.x does on an 8x RTX PRO 6000 host.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Mapping

# Resolved defaults for the flags SGLang leaves on "auto".
AUTO_MEM_FRACTION = 0.80
# SGLang picks the capture range from GPU memory; 160 is its long-standing value for large GPUs.
AUTO_CUDA_GRAPH_MAX_BS = 160
AUTO_CHUNKED_PREFILL_SIZE = 8192
# "Unlimited" for a sweep that never goes past C=16.
AUTO_MAX_RUNNING_REQUESTS = 256

# Choice lists, as the emulated SGLang version's argparse accepts them.
MOE_RUNNER_BACKENDS = (
    "auto", "marlin", "flashinfer_mxfp4", "triton", "triton_kernel", "deep_gemm",
    "flashinfer_trtllm", "flashinfer_cutlass", "flashinfer_cutedsl", "cutlass",
)
MOE_A2A_BACKENDS = ("none", "deepep", "flashinfer")
ATTENTION_BACKENDS = (
    "auto", "triton", "torch_native", "flex_attention", "flashinfer",
    "fa3", "fa4", "flashmla", "trtllm_mla", "cutlass_mla",
)


@dataclass(frozen=True)
class SimConfig:
    tp_size: int = 1
    ep_size: int = 1
    moe_runner_backend: str = "auto"
    moe_a2a_backend: str = "none"
    attention_backend: str = "auto"
    mem_fraction_static: float | None = None
    disable_cuda_graph: bool = False
    cuda_graph_max_bs: int | None = None
    chunked_prefill_size: int | None = None
    max_running_requests: int | None = None
    nccl_proto: str | None = None
    nccl_algo: str | None = None
    nccl_p2p_disable: str | None = None
    gpus: int = 8
    gpu_memory_gb: float = 96.0

    @property
    def effective_mem_fraction(self) -> float:
        return AUTO_MEM_FRACTION if self.mem_fraction_static is None else self.mem_fraction_static

    @property
    def effective_cuda_graph_max_bs(self) -> int:
        return AUTO_CUDA_GRAPH_MAX_BS if self.cuda_graph_max_bs is None else self.cuda_graph_max_bs

    @property
    def effective_prefill_chunk(self) -> int | None:
        """Tokens per prefill pass; None means unchunked (SGLang's -1)."""
        size = AUTO_CHUNKED_PREFILL_SIZE if self.chunked_prefill_size is None else self.chunked_prefill_size
        return None if size == -1 else size

    @property
    def effective_max_running(self) -> int:
        if self.max_running_requests is None:
            return AUTO_MAX_RUNNING_REQUESTS
        return self.max_running_requests

    @property
    def effective_attention_backend(self) -> str:
        # DSv4 on sm_120: "auto" lands on the triton fallback path.
        return "triton" if self.attention_backend in ("auto", "", None) else self.attention_backend

    @property
    def effective_moe_runner_backend(self) -> str:
        # sglang 0.5.23 resolves "auto" to flashinfer_mxfp4 for MXFP4 experts on sm_120.
        return "flashinfer_mxfp4" if self.moe_runner_backend in ("auto", "", None) else self.moe_runner_backend

    @property
    def uses_cuda_graphs(self) -> bool:
        return not self.disable_cuda_graph


def _env_value(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    return None if value is None or value == "" else value


def visible_gpus(env: Mapping[str, str]) -> list[int]:
    """CUDA_VISIBLE_DEVICES as GPU indices (empty when unset): rank r runs on the r-th of them."""
    return [int(d) for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip().isdigit()]


def sim_config_from(args: argparse.Namespace, env: Mapping[str, str]) -> SimConfig:
    """SimConfig from a parsed SGLang-style command line and the server's environment.

    Missing attributes fall back to SimConfig's defaults, so a Namespace from another parser works.
    """
    defaults = SimConfig()

    def arg(name: str, fallback):
        value = getattr(args, name, None)
        return fallback if value is None else value

    return SimConfig(
        tp_size=int(arg("tp_size", defaults.tp_size)),
        ep_size=int(arg("ep_size", defaults.ep_size)),
        moe_runner_backend=str(arg("moe_runner_backend", defaults.moe_runner_backend)),
        moe_a2a_backend=str(arg("moe_a2a_backend", defaults.moe_a2a_backend)),
        attention_backend=str(arg("attention_backend", defaults.attention_backend)),
        mem_fraction_static=getattr(args, "mem_fraction_static", None),
        disable_cuda_graph=bool(arg("disable_cuda_graph", False)),
        cuda_graph_max_bs=getattr(args, "cuda_graph_max_bs", None),
        chunked_prefill_size=getattr(args, "chunked_prefill_size", None),
        max_running_requests=getattr(args, "max_running_requests", None),
        nccl_proto=_env_value(env, "NCCL_PROTO"),
        nccl_algo=_env_value(env, "NCCL_ALGO"),
        nccl_p2p_disable=_env_value(env, "NCCL_P2P_DISABLE"),
        gpus=len(visible_gpus(env)) if visible_gpus(env) else int(arg("sim_gpus", defaults.gpus)),
        gpu_memory_gb=float(arg("sim_gpu_memory_gb", defaults.gpu_memory_gb)),
    )
