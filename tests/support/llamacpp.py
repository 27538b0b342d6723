"""The real llama-server for tests: where the binary is, and the mark that skips without it (the
small random models are fixtures in tests/integration/conftest.py and tests/e2e/conftest.py).

The binary is found when this module is imported, before the isolated-home fixture changes HOME:
`$SWEEPER_LLAMA_SERVER`, else the build script's cache path (`make llama-server` builds it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeper.engines.llamacpp import BINARY_ENV, llama_server_path

LLAMA_SERVER = llama_server_path()

needs_llama_server = pytest.mark.skipif(
    not Path(LLAMA_SERVER).is_file(),
    reason=f"llama-server not built at {LLAMA_SERVER} (make llama-server, or set {BINARY_ENV})")
