"""llama.cpp's `llama-server`: a real engine that runs on any machine (CPU), built from the
llama-cpp-python sdist by scripts/build_llama_server.sh.

The binary is `$SWEEPER_LLAMA_SERVER` when set, else the build script's cache path
`${XDG_CACHE_HOME:-~/.cache}/sweeper/llama.cpp/<version>/bin/llama-server`, resolved on the
controller (for an SSH host, set SWEEPER_LLAMA_SERVER to the path on that host). The space's
`model` is the GGUF file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from sweeper.spec.space import Space
from sweeper.engines.adapter import EngineAdapter, EngineInfo, Readiness, Signature, space_flag_args
from sweeper.loadgen.endpoints import TokenizeApi

LLAMA_CPP_PYTHON_VERSION = "0.3.36"  # the sdist scripts/build_llama_server.sh builds from
BINARY_ENV = "SWEEPER_LLAMA_SERVER"

# Exact substrings of llama-server's own log lines (vendored llama.cpp of llama-cpp-python 0.3.36);
# most specific first: an allocation failure is followed by the generic "failed to load model".
LLAMACPP_SIGNATURES = (
    # the context (KV cache) or the model does not fit in memory
    Signature("insufficient memory (attempted to allocate", "oom"),  # ggml_aligned_malloc
    Signature("failed to allocate buffer for kv cache", "oom"),
    Signature("failed to allocate CPU buffer", "oom"),
    Signature("unable to allocate", "oom"),  # llama_model_load: unable to allocate CPU buffer
    Signature("std::bad_alloc", "oom"),
    # a config the engine refuses while creating the context
    Signature("quantized V cache requires flash_attn", "unsupported"),
    # aborts: e.g. `-np 16 -b 4 -ub 4` fails GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max)
    Signature("GGML_ASSERT(", "ggml_assert"),
    Signature("couldn't bind HTTP server socket", "port_busy"),
    Signature("invalid argument:", "invalid_argument"),
    # the model file: missing, then unreadable or not a model
    Signature("failed to open GGUF file", "model_missing"),
    Signature("error loading model", "model_load"),
    Signature("failed to load model", "model_load"),
    Signature("failed to create context with model", "context_init"),
    Signature("exiting due to model loading error", "model_load"),
)

LLAMACPP_INFO = EngineInfo(
    name="llamacpp",
    # /health answers 503 {"message": "Loading model"} until the model is loaded, then 200
    readiness=Readiness(health_path="/health", ready_line="listening on http://"),
    signatures=LLAMACPP_SIGNATURES,
    # POST /tokenize {"content": text} -> {"tokens": [...]}; no endpoint empties its slots' cache
    tokenize=TokenizeApi("/tokenize", "content", sends_model=False),
)


def default_llama_server_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where scripts/build_llama_server.sh puts the binary."""
    environ = os.environ if environ is None else environ
    cache = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME", "~")).expanduser() / ".cache")
    return Path(cache) / "sweeper" / "llama.cpp" / LLAMA_CPP_PYTHON_VERSION / "bin" / "llama-server"


def llama_server_path(environ: Mapping[str, str] | None = None) -> str:
    """The llama-server binary: $SWEEPER_LLAMA_SERVER, else the build script's cache path."""
    environ = os.environ if environ is None else environ
    return environ.get(BINARY_ENV) or str(default_llama_server_path(environ))


def model_path(model: str) -> str:
    """The space's GGUF path with `~` expanded and a relative path taken from the controller's
    working directory (the server runs in its trial folder)."""
    return str(Path(model).expanduser().absolute())


def build_llamacpp_argv(binary: str, space: Space, config: Mapping[str, Any], port: int) -> list[str]:
    argv = [binary, "--model", model_path(space.model), "--host", "127.0.0.1", "--port", str(port)]
    return argv + space_flag_args(space, config)


class LlamaCppEngine(EngineAdapter):
    info = LLAMACPP_INFO
    checks_short_flags = True  # llama-server's help lists its short flags (-t, -np, ...)
    flag_family = "llamacpp"

    def binary(self) -> str:
        return llama_server_path()

    def help_argv(self, python: str) -> list[str]:
        return [self.binary(), "--help"]

    def version_argv(self, python: str) -> list[str]:
        return [self.binary(), "--version"]

    def build_argv(self, space: Space, config: Mapping[str, Any], port: int, python: str) -> list[str]:
        return build_llamacpp_argv(self.binary(), space, config, port)
