"""A real simulated SGLang server for tests: `python -m sweeper.sim` on a free port in a session
of its own, its merged output collected by a reader thread, SIGKILLed as a whole process group
(its scheduler children outlive a killed parent by design)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Iterator

from tests.support.paths import ROOT
from tests.support.ports import free_port

SCALE = 0.02  # --time-scale: a modelled second lasts 20 ms
# Configs tests launch: the case study's baseline, the model's optimum, and one that answers garbage.
BASELINE_FLAGS = ["--tp", "8", "--moe-runner-backend", "marlin", "--attention-backend", "triton",
                  "--mem-fraction-static", "0.70"]
OPTIMUM_FLAGS = ["--tp", "8", "--ep", "8", "--moe-runner-backend", "flashinfer_mxfp4",
                 "--attention-backend", "triton", "--mem-fraction-static", "0.70"]
OPTIMUM_ENV = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"}
GARBAGE_FLAGS = ["--tp", "8", "--moe-runner-backend", "triton", "--mem-fraction-static", "0.70"]


class SimProcess:
    """One `python -m sweeper.sim` process with its merged output collected by a reader thread."""

    def __init__(self, flags: list[str], env: dict[str, str] | None = None, seed: int = 7) -> None:
        self.port = free_port()
        self.argv = ["--model-path", "deepseek-ai/DeepSeek-V4-Flash", "--host", "127.0.0.1",
                     "--port", str(self.port), "--time-scale", str(SCALE), "--load-seconds", "30",
                     "--random-seed", str(seed), *flags]
        self.env = {**os.environ, **(env or {})}
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen([sys.executable, "-m", "sweeper.sim", *self.argv], cwd=ROOT, env=self.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self._lines: list[str] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self._lines.append(line)
                self._changed.notify_all()

    @property
    def output(self) -> str:
        with self._changed:
            return "".join(self._lines)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_for_line(self, text: str, timeout: float = 15.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not any(text in line for line in self._lines):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
        return True

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if http_status(self.url + "/health_generate") == 200:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"server never became ready:\n{self.output[-3000:]}")

    def kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


@contextlib.contextmanager
def launched(flags: list[str], env: dict[str, str] | None = None) -> Iterator[SimProcess]:
    server = SimProcess(flags, env)
    try:
        yield server
    finally:
        server.kill_group()


def http_status(url: str) -> int | str:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, ConnectionError) as exc:
        return "refused" if "refused" in str(exc).lower() else repr(exc)
