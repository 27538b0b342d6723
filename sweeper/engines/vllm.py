"""vLLM (0.33): `vllm serve MODEL` with flags and environment from a config.

Started as `python -m vllm.entrypoints.cli.main serve MODEL ...` (what the `vllm` console script
runs), so the host's interpreter picks the installation, as with SGLang. Its `--help` lists only
the config groups; `--help=all` lists every flag, which the flag check needs."""

from __future__ import annotations

from typing import Any, Mapping

from sweeper.spec.space import Space
from sweeper.engines.base import EngineAdapter, EngineInfo, Readiness, Signature, space_flag_args

# Exact substrings from vLLM 0.33's sources and logs (engines.md; vllm/v1/core/kv_cache_planning.py,
# vllm/v1/worker/utils.py, vllm/v1/engine/utils.py); most specific first: the engine core's own
# error comes before the generic "Engine core initialization failed" the front end logs after it.
VLLM_SIGNATURES = (
    Signature("No available memory for the cache blocks", "not_enough_memory"),
    Signature("To serve at least one request with the model's max seq len", "kv_cache_too_small"),
    Signature("is less than desired GPU memory utilization", "gpus_not_clean"),
    Signature("CUDA out of memory", "oom"),
    Signature("Watchdog caught collective operation timeout", "nccl"),
    Signature("NCCL error", "nccl"),
    Signature("NCCL WARN", "nccl"),
    Signature("address already in use", "port_busy"),  # uvicorn: [Errno 98] error while attempting to bind
    Signature("is not supported on this device", "unsupported"),
    Signature("is not supported on the current device", "unsupported"),
    Signature("Engine core initialization failed", "child_crash"),
)

VLLM_INFO = EngineInfo(
    name="vllm",
    # connection refused until the API server starts; then /health 200 (503 once the engine is dead)
    readiness=Readiness(health_path="/health", ready_line="Application startup complete."),
    signatures=VLLM_SIGNATURES,
)


def build_vllm_argv(module: str, space: Space, config: Mapping[str, Any], port: int, python: str) -> list[str]:
    argv = [python, "-m", module, "serve", space.model, "--host", "127.0.0.1", "--port", str(port)]
    return argv + space_flag_args(space, config)


class VLLMEngine(EngineAdapter):
    info = VLLM_INFO
    module = "vllm.entrypoints.cli.main"
    distribution = "vllm"
    flag_family = "vllm"

    def help_argv(self, python: str) -> list[str]:
        return [python, "-m", self.module, "serve", "--help=all"]

    def build_argv(self, space: Space, config: Mapping[str, Any], port: int, python: str) -> list[str]:
        return build_vllm_argv(self.module, space, config, port, python)
