"""This machine as a host: servers run as subprocesses in their own session (setsid)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

from sweeper.spec.hosts import HostSpec
from sweeper.errors import UserError
from sweeper.hosts.base import TOKEN_VAR, CommandResult, ProcessDetails, ServerProcess, StopReport
from sweeper.hosts.gpu import APPS_QUERY, GPU_QUERY, GpuParseError, GpuSnapshot, parse_snapshot
from sweeper.hosts.procfs import (
    environ_has, environ_value, listening_inodes, live_group_members, read_cmdline, read_environ,
    read_stat, signal_server_group, socket_inodes_of, still_running,
)


READ_CHUNK = 64 * 1024 * 1024


class LocalHost:
    def __init__(self, name: str, spec: HostSpec):
        self.name, self.spec = name, spec
        self._children: dict[int, subprocess.Popen] = {}  # reaped on every check

    def run(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
            timeout_s: float = 120.0) -> CommandResult:
        try:
            done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s,
                                  env={**os.environ, **self.spec.env, **(env or {})}, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return CommandResult(tuple(argv), -1, "", f"{type(exc).__name__}: {exc}")
        return CommandResult(tuple(argv), done.returncode, done.stdout, done.stderr)

    def start_detached(self, argv: Sequence[str], env: Mapping[str, str], cwd: str,
                       log_path: str, token: str) -> ServerProcess:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            child = subprocess.Popen(
                list(argv), cwd=cwd, env={**os.environ, **env, TOKEN_VAR: token},
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopped as a whole, never by name
            )
        self._children[child.pid] = child
        stat = read_stat(child.pid)
        start_ticks = stat.start_ticks if stat else 0
        return ServerProcess(host=self.name, pid=child.pid, pgid=child.pid,
                             start_ticks=start_ticks, token=token, log_path=log_path)

    def _reap(self) -> None:
        for pid, child in list(self._children.items()):
            if child.poll() is not None:
                del self._children[pid]

    def is_alive(self, proc: ServerProcess) -> bool:
        self._reap()
        stat = read_stat(proc.pid)
        return bool(stat and stat.start_ticks == proc.start_ticks and stat.state not in ("Z", "X"))

    def _members(self, proc: ServerProcess) -> tuple[list[int], list[int]]:
        self._reap()
        ours, foreign = [], []
        for member in live_group_members(proc.pgid):
            owned = environ_has(read_environ(member.pid), TOKEN_VAR, proc.token)
            (ours if owned else foreign).append(member.pid)
        return ours, foreign

    def owned_members(self, proc: ServerProcess) -> list[int]:
        return self._members(proc)[0]

    def stop_group(self, proc: ServerProcess, grace_s: float) -> StopReport:
        started = time.monotonic()
        ours, foreign = self._members(proc)
        if not ours:
            return StopReport(False, "none", 0.0, (), tuple(foreign))
        used = "SIGTERM"
        signal_server_group(proc.pgid, ours, foreign, signal.SIGTERM)
        if not self._wait_gone(proc, ours, grace_s):
            used = "SIGKILL"
            signalled = self.owned_members(proc)
            signal_server_group(proc.pgid, signalled, foreign, signal.SIGKILL)
            self._wait_gone(proc, signalled, 10.0)
        return StopReport(True, used, time.monotonic() - started,
                          tuple(self.owned_members(proc)), tuple(foreign))

    def _wait_gone(self, proc: ServerProcess, signalled: list[int], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.owned_members(proc) or still_running(signalled, proc.pgid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def read_log(self, proc: ServerProcess, offset: int) -> tuple[str, int]:
        try:
            with open(proc.log_path, "rb") as log:
                log.seek(offset)
                data = log.read()
        except FileNotFoundError:
            return "", offset
        return data.decode(errors="replace"), offset + len(data)

    def read_bytes(self, path: str, offset: int) -> bytes:
        try:
            with open(path, "rb") as source:
                source.seek(offset)
                return source.read(READ_CHUNK)
        except FileNotFoundError:
            return b""

    def port_is_free(self, port: int) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            # As servers bind (uvicorn, llama-server): a port whose old connections sit in TIME_WAIT
            # is free. Without it every stop waited out TIME_WAIT, ~60 s a trial (seen on the H200).
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                return False
        return True

    def listens_on(self, proc: ServerProcess, port: int) -> bool:
        """Whether the socket listening on `port` belongs to this server (not to a process that
        took the port between our check and the server's bind)."""
        wanted = listening_inodes(port)
        return any(wanted & socket_inodes_of(pid) for pid in self.owned_members(proc))

    def base_url(self, port: int) -> str:
        return f"http://127.0.0.1:{port}"

    def python(self) -> str:
        return self.spec.python or sys.executable

    def gpu_snapshot(self) -> GpuSnapshot | None:
        """nvidia-smi on this machine; None when the gate is off or (auto) there is no nvidia-smi."""
        path = self.spec.env.get("PATH") or os.environ.get("PATH", "")
        exe = None if self.spec.gpu_gate == "off" else shutil.which("nvidia-smi", path=path)
        if exe is None:
            if self.spec.gpu_gate == "on":
                raise UserError(f"host {self.name!r}: gpu_gate is on but nvidia-smi is not on PATH")
            return None
        outputs = []
        for query in (GPU_QUERY, APPS_QUERY):
            run = subprocess.run([exe, *query[1:]], capture_output=True, text=True, timeout=60,
                                 env={**os.environ, "PATH": path})
            if run.returncode != 0:
                raise UserError(f"host {self.name!r}: {' '.join(query)} exited {run.returncode}")
            outputs.append(run.stdout)
        try:
            return parse_snapshot(*outputs)
        except GpuParseError as exc:
            raise UserError(f"host {self.name!r}: {exc}") from None

    def process_details(self, pids) -> dict[int, ProcessDetails]:
        details = {}
        for pid in pids:
            stat = read_stat(pid)
            if stat and stat.state not in ("Z", "X"):
                details[pid] = ProcessDetails(pid, stat.pgid, stat.start_ticks, read_cmdline(pid),
                                              environ_value(read_environ(pid), TOKEN_VAR))
        return details

    def take_disruption(self) -> str | None:
        return None  # no connection to lose

    def close(self) -> None:
        self._reap()
