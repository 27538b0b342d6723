"""Stand-ins for SGLang's per-GPU `sglang::scheduler_TP{rank}` child processes.

They are cheap sleepers, but they reproduce the process-model hazard the controller must
handle: they share the server's process group, and nothing ties their life to the parent, so a
SIGKILLed server leaves them running (as real schedulers escape and keep holding GPU memory).
The only reliable stop is to signal the whole process group (os.killpg), never the PID alone.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

# -S skips site imports: each child costs a few ms of CPU and ~8 MB of memory.
_CHILD_CODE = "import time\nwhile True:\n    time.sleep(3600)\n"


def spawn_scheduler_children(count: int) -> list[subprocess.Popen]:
    """Start `count` sleeper children in OUR process group (no new session, no parent-death signal)."""
    return [
        subprocess.Popen(
            [sys.executable, "-S", "-c", _CHILD_CODE, f"sglang::scheduler_TP{rank}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=True,
        )
        for rank in range(count)
    ]


def terminate_children(children: list[subprocess.Popen], grace_s: float = 1.0) -> None:
    """SIGTERM the children, SIGKILL stragglers after `grace_s`, and reap them all."""
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for child in children:
        remaining = max(deadline - time.monotonic(), 0.0)
        try:
            child.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
