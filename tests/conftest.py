"""Shared fixtures. Tests never read the user's ~/.ssh/config or real environment knobs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO_SPACE = ROOT / "search_spaces" / "demo-sim.yaml"


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory, monkeypatch):
    """Keep the user's home (ssh config, caches) and NCCL/SGLang knobs out of tests."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    for name in list(os.environ):
        if name.startswith(("NCCL_", "SGL", "SWEEPER_")):
            monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def python_exe() -> str:
    return sys.executable


from tests.sshd import ssh_home, sshd  # noqa: E402,F401  (the real OpenSSH server fixtures)
from tests.pg import pg_cluster, pg_url  # noqa: E402,F401  (a private PostgreSQL cluster)
