"""SGLang: `python -m sglang.launch_server` with flags and environment from a config."""

from __future__ import annotations

from typing import Any, Mapping

from sweeper.spec.hosts import HostSpec
from sweeper.spec.space import Space
from sweeper.engines.base import (
    EngineInfo, LaunchSpec, Readiness, Signature, env_value, package_version_argv, space_flag_args,
)

# Exact substrings from SGLang's logs (../shared/reference/engines.md), each found in the 0.5.23
# sources (tests/unit/test_failure_signatures.py names the files); most specific first.
SGLANG_SIGNATURES = (
    Signature("Capture cuda graph failed", "cuda_graph_capture"),
    Signature("Capture prefill CUDA graph failed", "cuda_graph_capture"),
    Signature("Not enough memory. Please try to increase --mem-fraction-static", "not_enough_memory"),
    Signature("Memory pool size is too small", "kv_cache_too_small"),
    Signature("The memory capacity is unbalanced", "gpus_not_clean"),
    Signature("CUDA out of memory", "oom"),
    Signature("out of resource: shared memory", "triton_shared_memory"),
    Signature("Watchdog caught collective operation timeout", "nccl"),
    Signature("NCCL error", "nccl"),
    Signature("NCCL WARN", "nccl"),
    # engines.md's "`is not available in ... seconds`" is too common a phrase to match on (model code
    # raises "... is not available in encoder-only mode"); 0.5.23's server_args raises this one:
    Signature("Port is already in use", "port_busy"),
    Signature("address already in use", "port_busy"),  # uvicorn's bind error
    Signature("is only supported on", "unsupported"),
    Signature("Scheduler hit an exception", "child_crash"),
    Signature("Received sigquit from a child process", "child_crash"),
    Signature("Initialization failed", "child_crash"),
)

SGLANG_INFO = EngineInfo(
    name="sglang",
    readiness=Readiness(health_path="/health_generate",
                        ready_line="The server is fired up and ready to roll!"),
    signatures=SGLANG_SIGNATURES,
)


def build_sglang_argv(module: str, space: Space, config: Mapping[str, Any], port: int,
                      python: str) -> list[str]:
    argv = [python, "-m", module, "--model-path", space.model, "--host", "127.0.0.1",
            "--port", str(port)]
    return argv + space_flag_args(space, config)


def build_env(space: Space, config: Mapping[str, Any], host: HostSpec) -> dict[str, str]:
    """Host env, then the space's fixed env, then parameters: the most specific wins."""
    env = {**host.env, **space.fixed_env}
    for name, value in config.items():
        target = space.target(name)
        if target.env:
            env[target.env] = env_value(value)
    return env


class SGLangEngine:
    info = SGLANG_INFO
    module = "sglang.launch_server"
    distribution = "sglang"  # the package whose version the flag table is cached under
    flag_family = "sglang"  # whose flag history (versions.py) explains a refused flag

    def help_argv(self, python: str) -> list[str]:
        return [python, "-m", self.module, "--help"]

    def version_argv(self, python: str) -> list[str]:
        return package_version_argv(python, self.distribution)

    def build_launch_spec(self, space: Space, config: Mapping[str, Any], host: HostSpec,
                          port: int, python: str) -> LaunchSpec:
        argv = build_sglang_argv(self.module, space, config, port, python)
        return LaunchSpec(argv=tuple(argv), env=build_env(space, config, host), port=port)

    def served_model(self, space: Space) -> str:
        return space.model

    def clock_scale(self, space: Space) -> float:
        return 1.0
