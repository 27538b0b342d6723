"""A test's environment: a home of its own, without the user's NCCL, SGLang or sweeper knobs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

KNOB_PREFIXES = ("NCCL_", "SGL", "SWEEPER_")


def isolate(monkeypatch: pytest.MonkeyPatch, home: Path) -> Path:
    """HOME set to `home` (the user's ssh config and caches out of reach), the knobs removed."""
    monkeypatch.setenv("HOME", str(home))
    for name in list(os.environ):
        if name.startswith(KNOB_PREFIXES):
            monkeypatch.delenv(name, raising=False)
    return home
