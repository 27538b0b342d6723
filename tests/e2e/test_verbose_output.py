"""`sweeper --verbose`: the engine's log tail when a stage fails or a server is slow to get ready,
and SSH connects and port forwards, as progress lines of the real CLI; with --quiet, one clear error."""

from __future__ import annotations

import re

import pytest

from tests.support.ports import free_port, worker_port
from tests.support.spaces import TINY_SPACE

pytestmark = pytest.mark.slow
STAMP = r"\d\d:\d\d:\d\d "

# The baseline boots in ~8 s of wall time (800 modelled seconds of weight load at 0.01), a quarter
# of its 20 s ready timeout more than once; the deepep seed crashes at start-up with SGLang's lines.
SLOW_AND_CRASHING = (TINY_SPACE.replace("--load-seconds: 30", "--load-seconds: 800")
                     .replace("ready_timeout_s: 60", "ready_timeout_s: 20")
                     .replace("budget: {trials: 5}", "budget: {trials: 2}"))
for seed in ("garbage", "rule"):
    start = SLOW_AND_CRASHING.index(f"  - name: {seed}")
    end = SLOW_AND_CRASHING.index("  - name:", start + 1) if seed == "garbage" else SLOW_AND_CRASHING.index("reference:")
    SLOW_AND_CRASHING = SLOW_AND_CRASHING[:start] + SLOW_AND_CRASHING[end:]


def test_verbose_shows_the_engine_log_tail_of_a_failed_stage_and_of_a_slow_start(cli):
    (cli.workdir / "slow.yaml").write_text(SLOW_AND_CRASHING)
    result = cli.run("--verbose", "--log-file", "progress.log", "sweep", "slow.yaml", "--study", "v",
                     "--trials", "2", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    # the slow start: its log tail so far (the weight load's progress bar), while it loads
    slow = re.search(STAMP + r"local: server on port \d+ not ready after \d+s \(of 20s\); \S+server.log ends:\n"
                     r"((?:    \| .*\n)+)", out)
    assert slow and "Loading safetensors checkpoint shards" in slow.group(1), out
    # the failed stage: stage, kind, message, then the engine's own lines
    crash = re.search(STAMP + r"trial 1 on local: wait_ready failed \(unsupported\): .*; \S+server.log ends:\n"
                      r"((?:    \| .*\n)+)", out)
    assert crash, out
    assert "DeepEP low-latency mode is only supported" in crash.group(1)
    assert "Received sigquit from a child process" in crash.group(1)
    assert "not ready after" in (cli.workdir / "progress.log").read_text()  # the log file keeps them too


def test_without_verbose_there_is_no_log_tail(cli):
    (cli.workdir / "slow.yaml").write_text(SLOW_AND_CRASHING.replace("--load-seconds: 800", "--load-seconds: 30"))
    result = cli.run("sweep", "slow.yaml", "--study", "n", "--trials", "2", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "infeasible: wait_ready/unsupported" in result.stdout
    assert "server.log ends" not in result.stdout + result.stderr


def test_verbose_shows_ssh_connects_and_port_forwards(ssh_cli):
    hosts = ssh_cli.workdir / "hosts.yaml"  # off the shared 32000, which other suites' servers use
    hosts.write_text(hosts.read_text().replace(f"base_port: {worker_port(32000)}", f"base_port: {free_port()}"))
    result = ssh_cli.run("--verbose", "sweep", "one-seed.yaml", "--host", "box", "--study", "s", "--trials", "1",
                         timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    both = result.stdout + result.stderr
    assert re.search(STAMP + r"host box: SSH connected to \S*127\.0\.0\.1", both), both
    assert re.search(STAMP + r"host box: port forward 127\.0\.0\.1:\d+ -> 127\.0\.0\.1:\d+", both), both
    for secret in ("hf_s3cr3t-value-91", "key-v4lu3-77", "pw-hunter2-55"):
        assert secret not in both


def test_verbose_and_quiet_together_is_one_clear_error(cli):
    result = cli.run("--verbose", "--quiet", "sweep", "tiny.yaml", "--study", "x")
    assert result.returncode == 2
    assert "--verbose and --quiet contradict each other" in result.stderr
    assert "Traceback" not in result.stderr and not (cli.workdir / "results").exists()
