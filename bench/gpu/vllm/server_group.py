"""Stopping the vLLM server a payload script started in its own session (start_new_session=True):
the group we started and recorded, never a process found by name."""

from __future__ import annotations

import os
import signal
import subprocess
import time


def stop_server(proc: subprocess.Popen) -> float:
    """SIGTERM to the server's process group, SIGKILL after 30 s; the seconds it took to exit."""
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    return time.monotonic() - t0
