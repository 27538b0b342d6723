"""The CLI as a user runs it: a real subprocess in a scratch folder, and what its runs leave there."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

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

    def study(self, name: str) -> optuna.Study:
        """The study `name` as the CLI stored it (the default storage: results/NAME/study.db)."""
        return optuna.load_study(study_name=name, storage=f"sqlite:///{self.workdir / 'results' / name / 'study.db'}")

    def outcomes(self, name: str) -> dict[int, dict]:
        """Each trial's outcome.json by trial number. A trial folder without one is a trial that
        failed unrecorded (an infrastructure fault: on a busy machine, a load client that lagged;
        or an interruption) and was queued again: checked so, then left out."""
        recorded, unrecorded = {}, []
        for folder in (self.workdir / "results" / name / "trials").iterdir():
            if (path := folder / "outcome.json").is_file():
                recorded[int(folder.name)] = json.loads(path.read_text())
            else:
                unrecorded.append(int(folder.name))
        trials = self.study(name).trials
        assert all(trials[n].state == TrialState.FAIL for n in unrecorded), [trials[n] for n in unrecorded]
        check_failures_retried(trials)
        return recorded


def check_failures_retried(trials: list[FrozenTrial], interrupted: int | None = None) -> None:
    """Every failed trial was interrupted (a kill, a Ctrl-C) or an infrastructure fault (on a busy
    machine, the load client that lagged) and was queued again; `interrupted`: how many of them the
    interruption made."""
    retried = {t.user_attrs.get("retry_of") for t in trials}
    failed = [t for t in trials if t.state == TrialState.FAIL]
    for t in failed:
        assert (t.user_attrs.get("interrupted") or t.user_attrs.get("infra_error")) and t.number in retried, \
            (t.number, t.user_attrs)
    if interrupted is not None:
        assert [bool(t.user_attrs.get("interrupted")) for t in failed].count(True) == interrupted, \
            [t.user_attrs for t in failed]


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
