"""Many workers, one study: each worker drives one host (or one GPU set of a host) and shares the
study through PostgreSQL.

What keeps workers from stepping on each other:
- a claim: before launching, a worker takes the study lock, checks that no COMPLETE, PRUNED or
  claimed RUNNING trial has the same config and that finished + claimed-running evaluations are
  below the budget, and marks its trial `claimed`; so no config is measured twice and no worker
  starts a trial past the budget;
- host leases (sweeper/fleet/leases.py): one server per host slot, whoever the controller;
- Optuna heartbeats: a worker that dies leaves a RUNNING trial whose heartbeat stops; any other
  worker fails it after the grace period and queues its config again (retry_stale_trial), and the
  next lease holder stops the dead worker's server (ownership-checked, as `resume` does).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from sweeper.spec.hosts import HostSpec
from sweeper.spec.space import Space, gpu_count_of
from sweeper.errors import InfraError, UserError
from sweeper.outcomes import HOST_BOUND_KINDS
from sweeper.hosts import Host, ServerProcess
from sweeper.interrupts import held_interrupts
from sweeper.fleet.leases import LeaseBook, LeaseKeeper, slot_name
from sweeper.study.recovery import stop_leftover_servers
from sweeper.study.trials import is_evaluation
from sweeper.search.samplers import build_sampler
from sweeper.spec.rules import excluded_by_rule, violated_constraints
from sweeper.study.store import StudyHandle, SweepEvents
from sweeper.study.objective import enqueue_retry, make_objective

STORAGE_VAR = "SWEEPER_STORAGE"
SLOT_PORT_STRIDE = 500  # servers of two GPU sets of one host never probe the same ports


class BudgetSpent(Exception):
    """The study's budget is spent by other workers: this worker's trial never launched."""


# ---------------------------------------------------------------- pure decisions

def budget_state(trials: Sequence[FrozenTrial], budget: int, me: int | None = None) -> str:
    """'spent' when finished evaluations reach the budget, 'wait' when claimed running trials
    would (one of them may still fail and need its slot back), else 'open'."""
    done = sum(1 for t in trials if is_evaluation(t))
    running = sum(1 for t in trials
                  if t.state == TrialState.RUNNING and t.user_attrs.get("claimed") and t.number != me)
    if done >= budget:
        return "spent"
    return "wait" if done + running >= budget else "open"


def decide_claim(trials: Sequence[FrozenTrial], number: int, key: str, budget: int,
                 host: str | None = None) -> tuple[str, FrozenTrial | None]:
    """('duplicate', trial) to copy a measured config, ('wait', trial) while another worker
    measures it, or budget_state's 'spent' / 'wait' / 'run'. A config refused on another host for
    its GPUs (too_many_gpus) is no verdict on it for `host`, whose GPUs may be enough."""
    for t in trials:
        if (t.number == number or t.user_attrs.get("config_key") != key or "duplicate_of" in t.user_attrs
                or refused_for_another_hosts_gpus(t, host)):
            continue
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
            return "duplicate", t
        if t.state == TrialState.RUNNING and t.user_attrs.get("claimed"):
            return "wait", t
    state = budget_state(trials, budget, me=number)
    return ("run" if state == "open" else state), None


def refused_for_another_hosts_gpus(trial: FrozenTrial, host: str | None) -> bool:
    """Whether the trial's config was refused at preflight for needing more GPUs than the host it
    was to run on, a host other than `host`."""
    failure = trial.user_attrs.get("failure") or {}
    return failure.get("kind") in HOST_BOUND_KINDS and trial.user_attrs.get("host") != host


def slot_plan(host_name: str, spec: HostSpec, gpu_set: str | None, need: int | None) -> tuple[list[str], str | None]:
    """(lease slots, CUDA_VISIBLE_DEVICES) for a trial on this worker's GPU set: its own set when
    the config fits in it, else every set of the host (the whole host)."""
    sets = list(spec.gpu_sets)
    if not sets:
        return [slot_name(host_name, None)], None
    if gpu_set is not None and need is not None and need <= len(gpu_set.split(",")):
        return [slot_name(host_name, gpu_set)], gpu_set
    devices = sorted({int(d) for s in sets for d in s.split(",")})
    return [slot_name(host_name, s) for s in sets], ",".join(map(str, devices))


def slot_host_spec(spec: HostSpec, gpu_set: str | None, visible: str | None) -> HostSpec:
    """The host spec a trial sees: its GPUs in CUDA_VISIBLE_DEVICES, its own port range."""
    if visible is None:
        return spec
    index = list(spec.gpu_sets).index(gpu_set) if gpu_set in spec.gpu_sets else 0
    return spec.model_copy(update={"env": {**spec.env, "CUDA_VISIBLE_DEVICES": visible},
                                   "base_port": spec.base_port + SLOT_PORT_STRIDE * index})


# ---------------------------------------------------------------- storage callbacks

def fail_stale(study: optuna.Study) -> None:
    """Fail the RUNNING trials whose worker stopped beating (Optuna calls retry_stale_trial for each)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def retry_stale_trial(study: optuna.Study, trial: FrozenTrial) -> None:
    """Optuna's heartbeat_stale_trial_callback: a dead worker's trial runs again (at most
    MAX_RETRIES times), with the same `retry_of` / `attempt` attrs an infrastructure fault gets."""
    enqueue_retry(study, trial.number, trial.params, trial.user_attrs)


def recover_shared(study: optuna.Study, book: LeaseBook, host: Host, host_name: str, grace_s: float) -> list[str]:
    """On a worker's start: fail stale RUNNING trials (retry_stale_trial queues them again), queue
    trials a Ctrl-C interrupted (once, under the study lock), and stop the servers failed trials left
    on this host (found by run token: sweeper/study/recovery.py; only a process carrying it is
    signalled, so a server that already exited or a reused PID is never touched)."""
    fail_stale(study)
    notes = []
    with book.study_lock(study.study_name):
        trials = study.get_trials(deepcopy=False)
        retried = {t.user_attrs.get("retry_of") for t in trials}
        for t in trials:
            if (t.state == TrialState.FAIL and t.user_attrs.get("interrupted") and t.number not in retried
                    and enqueue_retry(study, t.number, t.params, t.user_attrs)):
                notes.append(f"interrupted trial {t.number} queued to run again")
    # Found by the launch intents (written before each spawn), so a worker killed between its
    # spawn and the record of it leaves no server either; live workers' trials are RUNNING, not FAIL.
    notes += [note.replace("server of trial", "server of dead trial") for note in stop_leftover_servers(
        host, study.get_trials(deepcopy=False, states=(TrialState.FAIL,)), grace_s)]
    return notes


# ---------------------------------------------------------------- the worker

@dataclass
class WorkerOptions:
    heartbeat_s: float
    grace_s: float
    poll_s: float = 1.0


class SharedGate:
    """The hooks make_objective calls in a shared study: admit (claim or duplicate) and hold (leases)."""

    def __init__(self, handle: StudyHandle, host: Host, book: LeaseBook, holder: str, gpu_set: str | None,
                 options: WorkerOptions, events: SweepEvents, notify: Callable[[str], None] = lambda note: None):
        self.handle, self.host, self.book, self.holder = handle, host, book, holder
        self.gpu_set, self.options, self.events, self.notify = gpu_set, options, events, notify
        self.keeper: LeaseKeeper | None = None

    def admit(self, trial: optuna.Trial, config: Mapping[str, Any], key: str) -> FrozenTrial | None:
        """None: this trial may launch (it is claimed); a trial: copy its result. Waits while another
        worker measures the same config or the budget hangs on running trials."""
        study, space = self.handle.study, self.handle.space
        if excluded_by_rule(space, config) or violated_constraints(space, config):
            return None  # recorded infeasible without a launch: nothing to claim
        while True:
            with self.book.study_lock(study.study_name):
                verdict, other = decide_claim(study.get_trials(deepcopy=False), trial.number, key,
                                              self.handle.budget, self.handle.host_name)
                if verdict == "run":
                    trial.set_user_attr("claimed", True)
                    return None
            if verdict == "duplicate":
                return other
            if verdict == "spent":
                trial.set_user_attr("over_budget", True)
                raise BudgetSpent()
            fail_stale(study)  # a dead worker's claim must not hold us forever
            time.sleep(self.options.poll_s)

    @contextmanager
    def hold(self, trial: optuna.Trial, config: Mapping[str, Any]) -> Iterator[HostSpec]:
        """The leases this trial needs, held (and renewed) while it runs; yields its host spec."""
        handle = self.handle
        spec = handle.host_spec
        slots, visible = slot_plan(handle.host_name, spec, self.gpu_set, gpu_count_of(handle.space, config))
        keeper = LeaseKeeper(self.book, self.holder, self.options.heartbeat_s, self.options.poll_s)
        info = {"study": handle.name, "trial": trial.number}
        trial.set_user_attr("stage", "lease")
        grants = keeper.acquire(slots, info)
        trial.set_user_attr("slots", slots)
        try:
            for grant in grants:  # an expired lease: its dead holder's server may still run
                if proc := (grant.previous or {}).get("server"):
                    report = self.host.stop_group(ServerProcess.from_dict(proc), handle.space.launch.stop_grace_s)
                    if report.was_running:
                        self.notify(f"took over the expired lease on {grant.slot}: stopped the server of trial "
                                    f"{grant.previous.get('trial')} of {grant.previous.get('study')} "
                                    f"(pgid {proc['pgid']}, {report.signal})")
            self.keeper = keeper
            yield slot_host_spec(spec, self.gpu_set, visible)
        finally:
            self.keeper = None
            lost = list(keeper.lost)
            keeper.release()
        if lost:
            raise InfraError(f"lost the lease on {', '.join(lost)} during the trial (no renewal within the "
                             "grace period): its measurements are not kept")

    def server_started(self, trial: optuna.Trial, proc: ServerProcess) -> None:
        if self.keeper is not None:
            self.keeper.note({"study": self.handle.name, "trial": trial.number, "server": proc.to_dict()})


def run_worker(handle: StudyHandle, host: Host, book: LeaseBook, holder: str, gpu_set: str | None,
               options: WorkerOptions, events: SweepEvents, sampler_seed: int | None = None,
               time_budget_s: float | None = None, notify: Callable[[str], None] = lambda note: None) -> int:
    """Run trials on one host slot until the study's budget is spent (by all workers together),
    the sampler proposes nothing new for a long while, or the time budget passes. Returns the
    number of trials this worker ran."""
    study = handle.study
    name = study.user_attrs.get("sampler", handle.space.search.sampler)
    study.sampler = build_sampler(handle.space, handle.budget, name, sampler_seed)
    gate = SharedGate(handle, host, book, holder, gpu_set, options, events, notify)
    objective = make_objective(handle, host, events, gate=gate)
    started, ran = time.monotonic(), 0
    cap = handle.budget * 20 + 20  # duplicates are free, but an exhausted space must end
    while ran < cap:
        if time_budget_s is not None and time.monotonic() - started > time_budget_s:
            break
        state = budget_state(study.get_trials(deepcopy=False), handle.budget)
        if state == "spent":
            break
        if state == "wait":
            fail_stale(study)
            time.sleep(options.poll_s)
            continue
        try:
            with held_interrupts():  # raised within the objective or after optimize (sweeper/study/store.py)
                study.optimize(objective, n_trials=1, catch=(InfraError,), gc_after_trial=False)
        except BudgetSpent:
            break
        ran += 1
    return ran


def check_shared_storage(url: str) -> None:
    if not url.startswith("postgresql"):
        raise UserError("several hosts on one study need a PostgreSQL storage: "
                        "--storage postgresql+psycopg://USER:PASSWORD@HOST:5432/DB (docs/hosts.md \"Many hosts\")")


# ---------------------------------------------------------------- worker processes

def worker_argv(study: str, hosts_file: str, host: str, results: str, gpu_set: str | None = None,
                seed: int | None = None, time_budget: str | None = None, verbose: bool = False) -> list[str]:
    """The `sweeper worker` command line for one host slot (the storage URL travels in the
    environment, SWEEPER_STORAGE, so its password never shows in `ps`)."""
    argv = [sys.executable, "-m", "sweeper.cli", *(["--verbose"] if verbose else []), "worker", study, "--hosts", hosts_file, "--host", host,
            "--results", results]
    if gpu_set is not None:
        argv += ["--gpu-set", gpu_set]
    if seed is not None:
        argv += ["--seed", str(seed)]
    if time_budget is not None:
        argv += ["--time-budget", time_budget]
    return argv


def run_worker_processes(argvs: list[list[str]], storage: str) -> list[int]:
    """Start one worker process per argv and wait for all; returns their exit codes (130: a worker
    was interrupted and stopped its server). Ctrl-C in the terminal reaches every worker through the
    process group, so this process only keeps waiting; SIGTERM or SIGHUP to it is forwarded once, by
    pid. Never a second signal: it could cut short a worker's stop of its server."""
    env = {**os.environ, STORAGE_VAR: storage}
    procs = [subprocess.Popen(argv, env=env) for argv in argvs]
    forwarded = False

    def forward(signum, frame) -> None:
        nonlocal forwarded
        if not forwarded:
            forwarded = True
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)

    handlers = {signal.SIGTERM: forward, signal.SIGHUP: forward, signal.SIGINT: lambda signum, frame: None}
    previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}
    try:
        return [proc.wait() for proc in procs]
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
