"""This machine as a host: the agent's operations run in this process, servers as subprocesses in
their own session (setsid)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from sweeper.spec.hosts import HostSpec
from sweeper.hosts.agent import OPS, TOKEN_VAR, process_record, read_chunk, run_command, spawn_in_session
from sweeper.hosts.base import AgentHost, CommandResult, LaunchIntent, ServerProcess

READ_CHUNK = 64 * 1024 * 1024


class LocalHost(AgentHost):
    def __init__(self, name: str, spec: HostSpec):
        self.name, self.spec = name, spec
        self._children: dict[int, subprocess.Popen] = {}  # reaped on every operation

    def _agent(self, op: str, request: Mapping[str, Any], retry: bool = True, timeout_s: float = 60.0) -> dict:
        self._reap()
        return OPS[op](request)

    def _reap(self) -> None:
        for pid, child in list(self._children.items()):
            if child.poll() is not None:
                del self._children[pid]

    def run(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
            timeout_s: float = 120.0) -> CommandResult:
        done = run_command(list(argv), {**self.spec.env, **(env or {})}, timeout_s)
        return CommandResult(tuple(argv), done["returncode"], done["stdout"], done["stderr"])

    def run_python(self, source: str, stdin: bytes, timeout_s: float) -> CommandResult:
        argv = (self.python(), "-c", source)
        done = run_command(list(argv), dict(self.spec.env), timeout_s, stdin.decode())
        return CommandResult(argv[:2] + ("<program>",), done["returncode"], done["stdout"], done["stderr"])

    def launch_intent(self, cwd: str, token: str) -> LaunchIntent:
        return LaunchIntent(host=self.name, token=token, run_dir=cwd)  # process.json: launch.py writes it there

    def start_detached(self, argv: Sequence[str], env: Mapping[str, str], cwd: str,
                       log_path: str, token: str) -> ServerProcess:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        child = spawn_in_session(list(argv), cwd, {**env, TOKEN_VAR: token}, log_path)
        self._children[child.pid] = child
        return ServerProcess(host=self.name, **process_record(child.pid), token=token, log_path=log_path)

    def read_log(self, proc: ServerProcess, offset: int) -> tuple[str, int]:
        data = read_chunk(proc.log_path, offset)[0]
        return data.decode(errors="replace"), offset + len(data)

    def read_bytes(self, path: str, offset: int) -> bytes:
        return read_chunk(path, offset, READ_CHUNK)[0]

    def base_url(self, port: int) -> str:
        return f"http://127.0.0.1:{port}"

    def python(self) -> str:
        return self.spec.python or sys.executable

    def take_disruption(self) -> str | None:
        return None  # no connection to lose

    def close(self) -> None:
        self._reap()
