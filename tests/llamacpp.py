"""Helpers for tests against the real llama-server: where the binary is, a small model, a free port.

The binary is found when this module is imported, before the isolated-home fixture changes HOME:
`$SWEEPER_LLAMA_SERVER`, else the build script's cache path (`make llama-server` builds it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeper.engines.llamacpp import BINARY_ENV, llama_server_path
from sweeper.models.random_gguf import write_random_gguf

LLAMA_SERVER = llama_server_path()

needs_llama_server = pytest.mark.skipif(
    not Path(LLAMA_SERVER).is_file(),
    reason=f"llama-server not built at {LLAMA_SERVER} (make llama-server, or set {BINARY_ENV})")


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory) -> Path:
    """4 layers x 256, f16, 32000-token vocabulary: ~42 MB, loads in well under a second."""
    path = tmp_path_factory.mktemp("models") / "random-4x256.gguf"
    write_random_gguf(path, 4, 256, seed=0)
    return path


@pytest.fixture(scope="session")
def deep_gguf(tmp_path_factory) -> Path:
    """32 layers x 256, 300-token vocabulary (~55 MB): 64 KiB of f32 KV cache a token, so a context
    larger than the machine's memory has few cells, and its allocation fails within a fraction
    of a second of launch (the server sets its cells up before it allocates the cache)."""
    path = tmp_path_factory.mktemp("models") / "random-32x256.gguf"
    write_random_gguf(path, 32, 256, seed=0, vocab=300)
    return path


@pytest.fixture
def llama_env(monkeypatch) -> str:
    """Point sweeper (in this process and its children) at the binary."""
    monkeypatch.setenv(BINARY_ENV, LLAMA_SERVER)
    return LLAMA_SERVER


@pytest.fixture(scope="session")
def small_gguf(tmp_path_factory) -> Path:
    """8 layers x 512, f16: ~133 MB, slow enough per token (a few hundred tok/s on 2 cores) that
    the load generator is not the bottleneck and the levers show."""
    path = tmp_path_factory.mktemp("models") / "random-8x512.gguf"
    write_random_gguf(path, 8, 512, seed=0)
    return path
