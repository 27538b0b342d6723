"""Ports of the engine's own, against the real simulator in a real study (trial/launch.py,
sweeper/study/store.py): the preflight steps over a base port whose internal port another process holds,
and a port taken between the preflight and the bind is an infrastructure fault, retried on another
base port, never a config made infeasible; a queue of runs (validate, ablate: run_queue) runs that
retry before it ends. With DP attention the sim binds SGLang's TCP ports
--port + 233 .. + 238 (sim/ports.py) and logs SGLang's own lines when one is held."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import optuna
import pytest

from sweeper.hosts.local import LocalHost
from sweeper.study.store import create_study
from sweeper.study.runs import enqueue_runs, run_queue, run_sweep
from sweeper.study.trials import feasible_trials
from sweeper.spec.hosts import HostSpec
from sweeper.spec.space_file import parse_space
from tests.support.paths import ROOT
from tests.support.ports import free_port_on, worker_port
from tests.support.spaces import ONE_SEED_SPACE

SPACE_TEXT = (ONE_SEED_SPACE.replace("fixed_flags: {", "fixed_flags: {--attn-dp-size: 2, ")
              .replace("budget: {trials: 5}", "budget: {trials: 1}"))
DETOKENIZER = 235  # detokenizer_port = --port + 233 + 2 (sglang/srt/server_args.py, PortArgs.init_new)


class Events:
    """The sweep's events; `on_launch(name)` runs as a trial's launch stage begins ("trial 0")."""

    def __init__(self, on_launch=lambda name: None):
        self.on_launch = on_launch

    def trial_started(self, name, evaluation, budget, config): ...
    def level(self, name, level, metrics): ...
    def trial_finished(self, name, summary, best): ...

    def stage(self, name, stage):
        if stage == "launch":
            self.on_launch(name)


@pytest.fixture
def sweep(tmp_path):
    """Runs a one-evaluation sweep of the DP-attention space on this machine; returns the trials."""
    probe = LocalHost("probe", HostSpec(transport="local"))
    # a base port whose DP-attention ports and the next candidate's are free too
    base = next(p for p in range(free_port_on(probe, worker_port(41000), 10), 60000, 10)
                if all(probe.port_is_free(q) for o in (0, 10) for q in (p + o, *range(p + o + 233, p + o + 239))))
    probe.close()
    spec = HostSpec(transport="local", gpu_gate="off", load_from="controller", base_port=base,
                    env={"PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))})
    space_file = tmp_path / "ports.yaml"
    space_file.write_text(SPACE_TEXT)
    space = parse_space(SPACE_TEXT, str(space_file))

    def run(events: Events, queued: dict | None = None) -> tuple[list[optuna.trial.FrozenTrial], list[int]]:
        """The study's trials, and the numbers of its feasible ones: a sweep, or a queue of one run
        of the `queued` config."""
        handle = create_study("ports", space, space_file, "local", spec, tmp_path / "results", None, 1,
                              enqueue_seeds=queued is None)
        host = LocalHost("local", spec)
        try:
            if queued is None:
                run_sweep(handle, host, events)
            else:
                enqueue_runs(handle.study, [("baseline", queued)])
                run_queue(handle, host, events)
        finally:
            host.close()
        run.budget = handle.budget
        return handle.study.get_trials(), [t.number for t in feasible_trials(handle.study)]

    run.base, run.dir = base, tmp_path / "results" / "ports"
    return run


def launched_port(study_dir: Path, number: int) -> int:
    argv = json.loads((study_dir / "trials" / str(number) / "argv.json").read_text())
    return int(argv[argv.index("--port") + 1])


def test_the_preflight_steps_over_a_base_port_whose_internal_port_is_held(sweep):
    with socket.socket() as holder:  # a real process's socket on the detokenizer port of the base port
        holder.bind(("127.0.0.1", sweep.base + DETOKENIZER))
        holder.listen()
        trials, feasible = sweep(Events())
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE], [t.user_attrs for t in trials]
    assert feasible == [0] and "infra_error" not in trials[0].user_attrs
    assert launched_port(sweep.dir, 0) == sweep.base + 10


def trial_0s_port_taken_at_launch(sweep, queued: dict | None = None):
    """The run's trials and feasible numbers, trial 0's detokenizer port taken as its launch
    begins: the preflight found it free; the engine's bind will not."""
    held: list[socket.socket] = []

    def take_detokenizer_port(name: str) -> None:
        if name == "trial 0":
            sock = socket.socket()
            sock.bind(("127.0.0.1", sweep.base + DETOKENIZER))
            sock.listen()
            held.append(sock)

    try:
        return sweep(Events(take_detokenizer_port), queued)
    finally:
        for sock in held:
            sock.close()


def test_a_port_taken_after_the_preflight_is_an_infra_fault_retried_on_another_port(sweep):
    trials, feasible = trial_0s_port_taken_at_launch(sweep)
    first, retry = trials
    assert first.state == optuna.trial.TrialState.FAIL
    assert "Port is already in use" in first.user_attrs["infra_error"]
    assert f"--port {sweep.base}" in first.user_attrs["infra_error"]
    assert "detokenizer_port" in (sweep.dir / "trials" / "0" / "server.log").read_text()
    assert not (sweep.dir / "trials" / "0" / "outcome.json").exists()  # never recorded as the config's result
    assert retry.user_attrs["retry_of"] == 0 and retry.user_attrs["avoid_ports"] == [sweep.base]
    assert retry.state == optuna.trial.TrialState.COMPLETE and feasible == [1], retry.user_attrs
    assert retry.params == first.params
    assert launched_port(sweep.dir, 1) == sweep.base + 10


def test_a_queued_run_met_by_an_infra_fault_is_run_again_before_the_queue_ends(sweep):
    """`validate` once left the retry waiting: its finalist had one good run of two."""
    params = {"tp_size": 8, "ep_size": 1, "moe_a2a_backend": "none", "moe_runner_backend": "marlin",
              "nccl_proto": "Simple"}
    trials, feasible = trial_0s_port_taken_at_launch(sweep, queued=params)
    first, retry = trials
    assert first.state == optuna.trial.TrialState.FAIL and "Port is already in use" in first.user_attrs["infra_error"]
    assert retry.state == optuna.trial.TrialState.COMPLETE and feasible == [1], retry.user_attrs
    assert retry.user_attrs["retry_of"] == 0 and retry.user_attrs["label"] == "baseline" and retry.params == params
    assert sweep.budget == 1  # the one evaluation it ran: the failed launch was not one
