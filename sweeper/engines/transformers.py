"""Hugging Face `transformers serve MODEL` (transformers 5.x): started as
`python -m transformers.cli.transformers serve MODEL --host 127.0.0.1 --port N` plus the space's
flags. Its levers (flag spellings of transformers 5.17's cli/serve.py; typer bools, so a true bool
is the bare flag): --continuous-batching, --attn-implementation, --compile, --dtype, --device,
--cb-block-size, --cb-num-blocks, --cb-max-batch-tokens, --cb-max-memory-percent (the memory
fraction the paged KV cache may take), --cb-use-cuda-graph.

The server pins every request to MODEL exactly as launched, refuses unknown request fields with
422 (no `ignore_eos`, no `min_tokens`), takes text prompts only, streams one final chunk on
/v1/completions (so load goes to /v1/chat/completions), and reports usage only in the last chunk:
its RequestDialect says all of that for the load generator.
"""

from __future__ import annotations

from pathlib import Path

from sweeper.spec.engine_traits import request_api
from sweeper.spec.space import Space
from sweeper.engines.adapter import EngineInfo, ModuleEngine, Readiness, Signature
from sweeper.loadgen.endpoints import RequestDialect


# Exact substrings of what `transformers serve`, torch and uvicorn log (transformers 5.17, torch
# 2.11); most specific first: a compile failure's traceback also names the OOM or the graph error
# that caused it, and the specific kind is the useful one.
TRANSFORMERS_SIGNATURES = (
    # CUDA graph capture (--cb-use-cuda-graph, or --compile's cudagraph trees)
    Signature("operation not permitted when stream is capturing", "cuda_graph_capture"),
    Signature("cudaErrorStreamCaptureInvalidated", "cuda_graph_capture"),
    # GPU memory: torch's allocator, then a raw CUDA error
    Signature("torch.OutOfMemoryError", "oom"),
    Signature("CUDA out of memory", "oom"),
    Signature("CUDA error: out of memory", "oom"),
    # torch.compile (--compile): dynamo and inductor failures
    Signature("torch._dynamo.exc.BackendCompilerFailed", "compile_failed"),
    Signature("BackendCompilerFailed", "compile_failed"),
    Signature("torch._inductor.exc.InductorError", "compile_failed"),
    Signature("InductorError", "compile_failed"),
    Signature("torch._dynamo.exc.Unsupported", "compile_failed"),
    Signature("torch._dynamo.exc.", "compile_failed"),
    # the continuous-batching worker died (it also answers /health with 503)
    Signature("CB worker is dead", "cb_worker_dead"),
    Signature("CB worker died", "cb_worker_dead"),
    Signature("Generation thread terminated unexpectedly", "cb_worker_dead"),
    # a lever value the installed transformers refuses
    Signature("Unsupported attention implementation", "unsupported"),
    Signature("has been toggled on, but it cannot be used", "unsupported"),  # flash-attn not installed
    Signature("does not support an attention implementation through", "unsupported"),
    Signature("Unsupported dtype", "invalid_argument"),
    Signature("No such option", "invalid_argument"),  # typer: Error: No such option '--foo'.
    Signature("Invalid value for", "invalid_argument"),
    # the server's own environment
    Signature("Missing dependencies for serving", "missing_dependency"),
    Signature("No module named", "missing_dependency"),
    Signature("address already in use", "port_busy"),  # uvicorn: [Errno 98] error while attempting to bind
    Signature("is not a local folder and is not a valid model identifier", "model_missing"),
    Signature("Repo id must be in the form", "model_missing"),  # a missing local path, offline
    Signature("does not appear to have a file named", "model_load"),
    Signature("Error while deserializing header", "model_load"),  # a truncated safetensors file
    Signature("CUDA error:", "cuda_error"),
)

TRANSFORMERS_DIALECT = RequestDialect(
    api=request_api("transformers"), text_prompts=True, ignore_eos=False, min_tokens=False, continuous_usage=False,
    coalesced_stream=True,
)

TRANSFORMERS_INFO = EngineInfo(
    name="transformers",
    # /health answers 200 once uvicorn is up (the pinned model is loaded before); 503 when the CB
    # worker died. Readiness also needs a real generation (trial.wait_ready).
    readiness=Readiness(health_path="/health", ready_line="Application startup complete."),
    signatures=TRANSFORMERS_SIGNATURES,
    dialect=TRANSFORMERS_DIALECT,
)


def served_model_path(model: str) -> str:
    """A model folder that exists here as an absolute path (the server runs in its trial folder,
    and requests must name exactly what it was launched with); anything else (a hub id, or a path
    on a remote host) unchanged."""
    path = Path(model).expanduser()
    return str(path.absolute()) if path.exists() else model



class TransformersEngine(ModuleEngine):
    info = TRANSFORMERS_INFO
    module = "transformers.cli.transformers"  # has a __main__ guard; the `transformers` script runs it
    command = ("serve",)
    distribution = "transformers"

    def served_model(self, space: Space) -> str:
        return served_model_path(space.model)
