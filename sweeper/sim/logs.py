"""SGLang-style log output: `[YYYY-MM-DD HH:MM:SS TP0] message`, tqdm bars and uvicorn lines.

Everything goes to stdout, flushed per line, so a watchdog tailing a log file sees progress live.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def timestamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


class SimLog:
    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stdout

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text + "\n")
            self._stream.flush()
        except (BrokenPipeError, ValueError):
            pass  # the reader went away; the server keeps running like a real one would

    def info(self, message: str, rank: int | None = None) -> None:
        where = f" TP{rank}" if rank is not None else ""
        self._write(f"[{timestamp()}{where}] {message}")

    def raw(self, line: str) -> None:
        """A line without SGLang's prefix (tqdm progress, uvicorn, uncaught tracebacks)."""
        self._write(line)

    def record(self, record: str) -> None:
        """A failure record: uncaught tracebacks print bare, scheduler errors carry a TP0 prefix."""
        if record.startswith("Traceback"):
            self.raw(record)
        elif record.startswith("Scheduler hit an exception"):
            self.info(record, rank=0)
        else:
            self.info(record)

    def uvicorn(self, message: str) -> None:
        self._write(f"INFO:     {message}")


def progress_bar(label: str, done: int, total: int, elapsed_s: float, rate_label: str = "it/s") -> str:
    """A tqdm-like line, e.g. `Loading safetensors checkpoint shards:  40% Completed | 18/46 [..]`."""
    fraction = done / total if total else 1.0
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    remaining = (total - done) / rate if rate > 0 else 0.0
    return (f"{label}: {fraction * 100:3.0f}% Completed | {done}/{total} "
            f"[{_clock(elapsed_s)}<{_clock(remaining)}, {rate:5.2f}{rate_label}]")


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 60:02d}:{seconds % 60:02d}"
