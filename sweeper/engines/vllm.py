"""vLLM (0.24 and 0.33): `vllm serve MODEL` with flags and environment from a config.

Started as `python -m vllm.entrypoints.cli.main serve MODEL ...` (what the `vllm` console script
runs), so the host's interpreter picks the installation, as with SGLang. Its `--help` lists only
the config groups; `--help=all` lists every flag, which the flag check needs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from sweeper.spec.hosts import HostSpec
from sweeper.spec.engine_traits import PARALLEL_FLAGS
from sweeper.spec.space import Space
from sweeper.engines.adapter import EngineInfo, LaunchSpec, ModuleEngine, Readiness, Signature
from sweeper.spec.engine_ports import env_ports, flag_ports
from sweeper.loadgen.endpoints import TokenizeApi
from sweeper.loadgen.probe import PrefixCacheApi

# Exact substrings from vLLM's sources and logs (engines.md; 0.33: vllm/v1/core/kv_cache_planning.py,
# vllm/v1/worker/utils.py, vllm/v1/engine/utils.py; 0.24.0 as run on the H200:
# tests/fixtures/vllm/fail_*.log); most specific first: the engine core's own error comes before the
# generic "Engine core initialization failed" the front end logs after it.
VLLM_SIGNATURES = (
    Signature("No available memory for the cache blocks", "not_enough_memory"),
    Signature("To serve at least one request with the model's max seq len", "kv_cache_too_small"),
    # "Free memory on device (x/y GiB) on startup is less than desired GPU memory utilization (u, z
    # GiB)": the GPU gate saw the GPU clean before launch, so the utilization asks for too much
    Signature("is less than desired GPU memory utilization", "memory_utilization_too_high"),
    Signature("CUDA out of memory", "oom"),
    Signature("Watchdog caught collective operation timeout", "nccl"),
    Signature("NCCL error", "nccl"),
    Signature("NCCL WARN", "nccl"),
    Signature("address already in use", "port_busy"),  # uvicorn: [Errno 98] error while attempting to bind
    # the engine core's ZMQ sockets ("zmq.error.ZMQError: Address already in use (addr='tcp://...')")
    # and torch.distributed's store ("... code: -98, name: EADDRINUSE, message: address already in use")
    # (not the bare phrase: vLLM warns "Address already in use. Retrying with a new port." and goes on)
    Signature("ZMQError: Address already in use", "port_busy"),
    Signature("name: EADDRINUSE", "port_busy"),
    Signature("is not supported on this device", "unsupported"),
    Signature("is not supported on the current device", "unsupported"),
    # 0.24: "ValueError: moe_backend='triton_unfused' is not supported for unquantized MoE": a
    # listed choice, refused after the weights load (~40 s in)
    Signature("is not supported for", "unsupported"),
    # flag values the flag check cannot judge: pydantic's refusal of a config field ("1 validation
    # error for CacheConfig ... Input should be less than or equal to 1"), argparse's of a value
    Signature("validation error for", "invalid_argument"),
    Signature("smaller than max_model_len", "invalid_argument"),  # batched tokens without chunked prefill
    Signature(": error: argument", "invalid_argument"),  # "vllm serve: error: argument --x: invalid int value"
    Signature("Engine core initialization failed", "child_crash"),
)

# The internal ports a vLLM server can be told (0.33's `serve --help=all`); left unset it asks the
# kernel for free ones (vllm/utils: get_open_port), except that VLLM_PORT makes that search start
# at a fixed port and count up.
VLLM_PORT_FLAGS = {
    ("--grpc-port",): "--grpc-port",
    ("--data-parallel-rpc-port", "-dpp"): "--data-parallel-rpc-port",
    ("--data-parallel-supervisor-port",): "--data-parallel-supervisor-port",
    ("--master-port",): "--master-port (torch.distributed)",
}
VLLM_PORT_ENV = {"VLLM_PORT": "VLLM_PORT (internal ports count up from it)"}

# Every launch compiles afresh into a compile cache of its own (relative: the server runs in its
# trial's folder). On the H200 the same config served 21-23k tok/s on launches that compiled
# (torch.compile, "saved AOT compiled function") and 15-18k on launches that loaded an earlier
# launch's artifact ("Directly load AOT compilation"): a campaign's sweep launch is a config's first
# and its validation launches its later ones, so one config measured two ways (bench/gpu/README.md,
# "Where the variance comes from"). A user's VLLM_CACHE_ROOT (host or space env) wins.
VLLM_CACHE_ENV = {"VLLM_CACHE_ROOT": "vllm-cache"}

VLLM_INFO = EngineInfo(
    name="vllm",
    # connection refused until the API server starts; then /health 200 (503 once the engine is dead)
    readiness=Readiness(health_path="/health", ready_line="Application startup complete."),
    signatures=VLLM_SIGNATURES,
    # 0.24's JIT monitor, once per kernel after its warm-up: "Triton kernel JIT compilation during
    # inference: fused_moe_kernel. This causes a latency spike; ..." (a ~0.5 s stall on the H200)
    stall_lines=("JIT compilation during inference",),
    # POST /reset_prefix_cache is routed only with VLLM_SERVER_DEV_MODE=1 in the server's env
    # (vllm/entrypoints/serve/cache/api_router.py); else 404, recorded as cache_flushed: false.
    # Counters (tokens): vllm:prefix_cache_hits_total, vllm:prefix_cache_queries_total
    prefix_cache=PrefixCacheApi(flush_path="/reset_prefix_cache", hits_counter="vllm:prefix_cache_hits",
                                queries_counter="vllm:prefix_cache_queries",
                                flush_needs="VLLM_SERVER_DEV_MODE=1 in the server's environment (the space's fixed_env)"),
    tokenize=TokenizeApi("/tokenize", "prompt", sends_model=True),  # -> {"count", "tokens", "max_model_len"}
    parallel_flags=PARALLEL_FLAGS["vllm"],
)



class VLLMEngine(ModuleEngine):
    info = VLLM_INFO
    module = "vllm.entrypoints.cli.main"
    command = ("serve",)
    help_words = ("--help=all",)
    distribution = "vllm"
    flag_family = "vllm"

    def build_launch_spec(self, space: Space, config: Mapping[str, Any], host: HostSpec,
                          port: int, python: str) -> LaunchSpec:
        spec = super().build_launch_spec(space, config, host, port, python)
        return replace(spec, env={**VLLM_CACHE_ENV, **spec.env})

    def bound_ports(self, spec: LaunchSpec) -> dict[int, str]:
        return {**super().bound_ports(spec), **flag_ports(spec.argv, VLLM_PORT_FLAGS),
                **env_ports(spec.env, VLLM_PORT_ENV)}

    def native_bench_argv(self, python: str, base_url: str, model: str, input_len: int, output_len: int,
                          requests: int, concurrency: int, seed: int, result_file: str) -> list[str]:
        """`vllm bench serve` (0.24/0.33): random prompts of exactly input_len, ignore_eos, and
        greedy (--temperature 0): since 0.24 it no longer sends temperature 0 by default, and the
        server then samples, at another speed (bench/gpu/README.md, the side by side)."""
        folder, _, name = result_file.rpartition("/")
        return [python, "-m", self.module, "bench", "serve", "--backend", "vllm", "--base-url", base_url,
                "--model", model, "--tokenizer", model, "--dataset-name", "random",
                "--random-input-len", str(input_len), "--random-output-len", str(output_len),
                "--random-range-ratio", "0", "--num-prompts", str(requests), "--max-concurrency", str(concurrency),
                "--ignore-eos", "--temperature", "0", "--seed", str(seed),
                "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,95,99",
                "--save-result", "--save-detailed", "--result-dir", folder or ".", "--result-filename", name]
