"""The CLI as a user runs it: a real subprocess in a scratch folder, and what its runs leave there."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from sweeper.hosts.procfs import environ_has, live_group_members, read_environ
from tests.support.paths import ROOT

# Secrets the `ssh_cli` fixture's host entry carries in its env: no file or output may show them.
SECRETS = {"HF_TOKEN": "hf_s3cr3t-value-91", "MY_API_KEY": "key-v4lu3-77", "DB_PASSWORD": "pw-hunter2-55"}


class Cli:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "sweeper.cli", *args]

    def run(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(*args), cwd=self.workdir, env=self.env, capture_output=True,
                              text=True, timeout=timeout)

    def start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(self.argv(*args), cwd=self.workdir, env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def stop_recorded_group(process: dict) -> None:
    """SIGKILL the members of a recorded server group that carry its ownership token."""
    if not process.get("pgid") or not process.get("token"):
        return
    ours = [m.pid for m in live_group_members(process["pgid"])
            if environ_has(read_environ(m.pid), "SWEEPER_RUN_TOKEN", process["token"])]
    for pid in ours:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def server_in_load_stage(workdir: Path, study: str) -> dict | None:
    """The process.json of a trial whose server is being loaded (samples being written)."""
    trials = workdir / "results" / study / "trials"
    for trial in sorted(trials.glob("*"), key=lambda p: int(p.name)) if trials.exists() else []:
        process = trial / "process.json"
        if process.exists() and (trial / "samples").exists() and not (trial / "outcome.json").exists():
            return json.loads(process.read_text())
    return None
