"""Issue 29 item 5: a config the host cannot run is refused without a launch. A real sweep on the
simulator (SGLang flags, --tp-size) on a host whose hosts.yaml says `gpus: 1`: the TP 2 seed is
refused at preflight (too_many_gpus), nothing is started for it, it costs no evaluation and is
recorded infeasible for the sampler; the TP 1 config runs. `doctor` flags the seed."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState

from tests.support.cli import check_failures_retried
from tests.support.in_process import invoke_in
from tests.support.ports import worker_port

SPACE = """\
name: tp
engine: sim
model: deepseek-ai/DeepSeek-V4-Flash
fixed_flags: {--time-scale: 0.01, --load-seconds: 30, --sim-gpus: 1, --sim-gpu-memory-gb: 600}
parameters:
  tp_size: {type: categorical, choices: [1, 2], flag: --tp-size}
seeds:
  - {name: tp2, params: {tp_size: 2}}
  - {name: tp2-again, params: {tp_size: 2}}
workload: {input_len: 64, output_len: 32, concurrency: [1], min_rounds: 2, warmup_rounds: 1}
check: {mode: none}
budget: {trials: 1}
launch: {ready_timeout_s: 60, stall_timeout_s: 5, stop_grace_s: 5}
"""
BASE_PORT = worker_port(36700)  # its tests on two workers must not launch on, and check, one port
ONE_GPU = f"hosts:\n  local: {{transport: local, gpus: 1, gpu_gate: 'off', base_port: {BASE_PORT}}}\n"


def write(tmp_path: Path, hosts: str = ONE_GPU) -> None:
    (tmp_path / "space.yaml").write_text(SPACE)
    (tmp_path / "hosts.yaml").write_text(hosts)


def test_a_tp2_seed_on_a_one_gpu_host_is_refused_at_preflight_without_a_launch(tmp_path):
    write(tmp_path)
    result = invoke_in(tmp_path, "sweep", "space.yaml", "--study", "s", "--sampler", "brute")
    assert result.exit_code == 0, result.output
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'results/s/study.db'}")
    trials = sorted(study.get_trials(), key=lambda t: t.number)
    refused, again, measured = trials[0], trials[1], trials[-1]  # between: a busy machine's retried infra faults
    assert refused.params == {"tp_size": 2}
    assert refused.user_attrs["failure"]["stage"] == "preflight"
    assert refused.user_attrs["failure"]["kind"] == "too_many_gpus"
    assert refused.user_attrs["failure"]["message"] == "needs 2 GPUs, host local has 1"
    assert refused.user_attrs["launched"] is False and "process" not in refused.user_attrs
    assert refused.constraints["config_fault"] > 0  # config_fault: infeasible, as the sampler reads it
    assert not list((tmp_path / "results/s/trials/0").glob("server.log"))  # nothing started
    assert not (tmp_path / "results/s/trials/0/command.sh").exists()
    assert again.user_attrs["duplicate_of"] == 0 and again.constraints["config_fault"] > 0  # a copy, free
    # the one evaluation of the budget went to the config that fits
    assert measured.params == {"tp_size": 1} and measured.user_attrs["launched"] is True
    assert "failure" not in measured.user_attrs and measured.state == TrialState.COMPLETE
    check_failures_retried(trials)


def test_a_host_without_gpus_refuses_nothing(tmp_path):
    """No `gpus:` in the host entry: the sweep cannot know, so it launches, and the engine itself
    refuses TP 2 (the simulator models one GPU here: --sim-gpus 1), as vLLM did in the issue."""
    write(tmp_path, f"hosts:\n  local: {{transport: local, gpu_gate: 'off', base_port: {BASE_PORT}}}\n")
    result = invoke_in(tmp_path, "sweep", "space.yaml", "--study", "s", "--sampler", "brute")
    assert "wait_ready/crash" in result.output, result.output
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'results/s/study.db'}")
    first = min(study.get_trials(), key=lambda t: t.number)
    assert first.params == {"tp_size": 2} and first.user_attrs["launched"] is True
    assert first.user_attrs["failure"]["stage"] == "wait_ready"


def test_doctor_flags_a_seed_the_host_cannot_run(tmp_path):
    write(tmp_path)
    result = invoke_in(tmp_path, "doctor", "space.yaml")
    assert result.exit_code == 1, result.output
    problems = [line for line in result.output.splitlines() if line.startswith("problem")]
    assert len(problems) == 2 and problems[0].startswith(
        "problem  seed tp2: needs 2 GPUs, host local has 1: "), result.output
    assert ("warning  gpus: space: the space allows configs larger than the host (tp_size=2 needs 2 GPUs, "
            "host local has 1)") in result.output
    assert not (tmp_path / "results").exists()
