"""Helpers to run the CLI as a user would: a real subprocess in a scratch folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweeper.hosts.procfs import environ_has, live_group_members, read_environ
from tests.conftest import DEMO_SPACE, ROOT

# A small, fast version of the demo space: same engine, same failure modes, fewer levels.
# output_len 32: a request lasts ~65 ms at this time scale, so the client's own turnaround between
# requests (~0.5 ms: its wake-up, measured from the kernel's receive stamp) stays well inside the 5%
# that achieved concurrency may miss, also on a busy 2-core runner with sshd and the on-host client.
# (Tests quote this YAML's line numbers: keep comments out of it.)
TINY_SPACE = """\
name: tiny
engine: sim
model: deepseek-ai/DeepSeek-V4-Flash
fixed_flags: {--time-scale: 0.01, --load-seconds: 30}
parameters:
  tp_size: {type: categorical, choices: [4, 8], flag: --tp-size}
  ep_size: {type: categorical, choices: [1, 8], flag: --ep-size}
  moe_runner_backend: {type: categorical, choices: [marlin, flashinfer_mxfp4, triton], flag: --moe-runner-backend}
  moe_a2a_backend: {type: categorical, choices: [none, deepep], flag: --moe-a2a-backend}
  nccl_proto: {type: categorical, choices: [LL, Simple], env: NCCL_PROTO}
constraints:
  - ep_size <= tp_size
seeds:
  - name: baseline
    params: {tp_size: 8, ep_size: 1, moe_runner_backend: marlin, moe_a2a_backend: none, nccl_proto: Simple}
  - name: garbage
    params: {tp_size: 8, ep_size: 8, moe_runner_backend: triton, moe_a2a_backend: none, nccl_proto: LL}
  - name: deepep
    params: {tp_size: 8, ep_size: 8, moe_runner_backend: marlin, moe_a2a_backend: deepep, nccl_proto: LL}
  - name: rule
    params: {tp_size: 4, ep_size: 8, moe_runner_backend: marlin, moe_a2a_backend: none, nccl_proto: LL}
reference: baseline
workload: {input_len: 64, output_len: 32, concurrency: [1, 4], min_rounds: 2, warmup_rounds: 1}
budget: {trials: 5}
launch: {ready_timeout_s: 60, stall_timeout_s: 5, stop_grace_s: 5}
"""


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


@pytest.fixture
def cli(tmp_path) -> Cli:
    (tmp_path / "hosts.yaml").write_text((ROOT / "hosts.yaml").read_text())
    (tmp_path / "tiny.yaml").write_text(TINY_SPACE)
    (tmp_path / "demo-sim.yaml").write_text(DEMO_SPACE.read_text())
    yield Cli(tmp_path)
    # A test that fails or times out mid-sweep (its controller killed) must not leave its servers
    # holding ports for the tests after it: stop every recorded group still carrying its token.
    for record in tmp_path.rglob("process.json"):
        stop_recorded_group(json.loads(record.read_text()))


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


def wait_until(predicate, timeout: float = 60.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(interval)
