"""A short run of bench/storage_contention.py (issue 32): Ctrl-C the sweep's storage traffic while
readers poll the study and a busy loop takes a core; every run must end with 130 within 10 s,
with no storage traceback and no trial left RUNNING. The full benchmark (100 runs, 8 readers,
2 busy loops) and its numbers before and after the fix are in bench/README.md."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.paths import ROOT

pytestmark = pytest.mark.slow


def test_ctrl_c_under_reader_and_cpu_contention_ends_cleanly_every_time():
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "storage_contention.py"), "--runs", "3",
                             "--readers", "4", "--busy", "1", "--spread", "1.5"],
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr
    # a run whose stand-in never started is the harness's (said apart); two of three must be judged
    assert "0 of 3 runs failed" in result.stdout or "0 of 2 runs failed" in result.stdout, result.stdout
