"""SGLang: `python -m sglang.launch_server` with flags and environment from a config."""

from __future__ import annotations

from sweeper.spec.engine_traits import PARALLEL_FLAGS
from sweeper.engines.adapter import EngineInfo, LaunchSpec, ModuleEngine, Readiness, Signature
from sweeper.spec.engine_ports import sglang_internal_ports
from sweeper.loadgen.endpoints import TokenizeApi
from sweeper.loadgen.probe import PrefixCacheApi

# Exact substrings from SGLang's logs (../shared/reference/engines.md), each found in the 0.5.23
# sources (tests/unit/engines/test_failure_signatures.py names the files); most specific first.
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
    Signature("address already in use", "port_busy"),  # uvicorn's bind error; torch's TCPStore (below)
    # an internal port: ZMQ's bind ("zmq.error.ZMQError: Address already in use (addr='tcp://...')")
    # and torch.distributed's rendezvous store ("DistNetworkError: The server socket has failed to
    # listen on any local network address. port: 29500, useIPv6: 0, code: -98, name: EADDRINUSE, ...")
    # (not the bare phrase: vLLM warns "Address already in use. Retrying with a new port." and goes on)
    Signature("ZMQError: Address already in use", "port_busy"),
    Signature("name: EADDRINUSE", "port_busy"),
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
    # POST /flush_cache empties the radix cache (it refuses while requests run); /metrics only with
    # --enable-metrics: counters sglang:cached_tokens_total and sglang:prompt_tokens_total, and the
    # gauge sglang:cache_hit_rate (over recent batches)
    prefix_cache=PrefixCacheApi(flush_path="/flush_cache", hits_counter="sglang:cached_tokens",
                                queries_counter="sglang:prompt_tokens", hit_rate_gauge="sglang:cache_hit_rate"),
    tokenize=TokenizeApi("/tokenize", "prompt", sends_model=True),  # -> {"tokens", "count", ...}
    parallel_flags=PARALLEL_FLAGS["sglang"],
)



class SGLangEngine(ModuleEngine):
    info = SGLANG_INFO
    module = "sglang.launch_server"
    model_flag = ("--model-path",)
    distribution = "sglang"
    flag_family = "sglang"

    def bound_ports(self, spec: LaunchSpec) -> dict[int, str]:
        return {**super().bound_ports(spec), **sglang_internal_ports(spec.argv, spec.port)}
