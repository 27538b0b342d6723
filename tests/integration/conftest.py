"""Fixtures for the integration tests: the fake completion server and the small random models the
real llama-server loads (the code behind them is in tests/support/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeper.engines.llamacpp import BINARY_ENV
from sweeper.models.random_gguf import write_random_gguf
from tests.support.fake_servers import Behaviour, FakeCompletionServer
from tests.support.llamacpp import LLAMA_SERVER


@pytest.fixture
def serve():
    """start(**behaviour) -> a running FakeCompletionServer; all of them stop after the test."""
    servers: list[FakeCompletionServer] = []

    def start(**behaviour) -> FakeCompletionServer:
        server = FakeCompletionServer(Behaviour(**behaviour)).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


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
