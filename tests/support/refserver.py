"""bench/refserver.py as a real process for tests: exactly known token timing and, with
max_batch, exactly known queueing (at most B streams at once, the rest wait in arrival order)."""

from __future__ import annotations

import contextlib
import math
import socket
import subprocess
import sys
from typing import Iterator

from tests.support.paths import ROOT
from tests.support.ports import free_port
from tests.support.waiting import wait_for


def closed_loop_p99_ttft_ms(concurrency: int, max_batch: int, ttft_ms: float, gap_ms: float, output_len: int) -> float:
    """The worst TTFT of a closed loop at C: waves of B, each slot busy TTFT + (n - 1) GAP."""
    return ttft_ms + (math.ceil(concurrency / max_batch) - 1) * (ttft_ms + (output_len - 1) * gap_ms)


@contextlib.contextmanager
def refserver(ttft_ms: float, gap_ms: float, max_batch: int | None = None) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, str(ROOT / "bench" / "refserver.py"), "--port", str(port),
            "--ttft-ms", str(ttft_ms), "--gap-ms", str(gap_ms)]
    if max_batch is not None:
        argv += ["--max-batch", str(max_batch)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    try:
        wait_for(lambda: _accepts(port) or proc.poll() is not None, timeout=20)
        assert proc.poll() is None, "bench/refserver.py exited at start-up"
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False
