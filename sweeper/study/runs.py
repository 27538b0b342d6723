"""Running a study's trials: a sweep (the sampler's proposals), a queue of given configs and their
measured values, and recovery of the trials a dead controller left RUNNING."""

from __future__ import annotations

from contextlib import contextmanager, suppress
from typing import Iterator

import optuna
from optuna.trial import FrozenTrial, TrialState

from sweeper.errors import InfraError
from sweeper.hosts import Host
from sweeper.study.recovery import stop_leftover_servers
from sweeper.study.trials import is_feasible
from sweeper.search.samplers import build_sampler
from sweeper.study.storage import StorageBusy
from sweeper.interrupts import held_interrupts, stopping
from sweeper.study.stored import output_rejected, reference_text
from sweeper.study.store import StudyHandle, SweepEvents, controller_identity
from sweeper.study.objective import BudgetCallback, evaluations, REPEATS_ATTR, enqueue_retry, make_objective


def run_sweep(handle: StudyHandle, host: Host, events: SweepEvents, sampler_seed: int | None = None,
              time_budget_s: float | None = None) -> None:
    """Run trials until the budget of evaluations is spent, the sampler runs out of configs, or
    this run's time budget passes (checked between trials)."""
    study = handle.study
    name = study.user_attrs.get("sampler", handle.space.search.sampler)
    study.sampler = build_sampler(handle.space, handle.budget, name, sampler_seed)
    study.set_user_attr("controller", controller_identity())
    remaining = handle.budget - evaluations(study)
    if remaining <= 0:
        return
    # Duplicates and rule-excluded configs are free, so allow many more trials than evaluations.
    with interrupted_trials_failed(study):
        study.optimize(make_objective(handle, host, events), n_trials=remaining * 20 + 20,
                       timeout=time_budget_s, callbacks=[BudgetCallback(handle.budget)],
                       catch=(InfraError,), gc_after_trial=False)


def enqueue_runs(study: optuna.Study, runs: list[tuple[str, dict]], seed_label: str | None = None,
                 measure_again: bool = True, repeats: int | None = None) -> None:
    """Queue configs to be measured as given (no dedupe): ablation levers, finalist repeats; with
    `measure_again=False`, seeds of a search (warm start: a config already in the study is a duplicate).
    `repeats`: in-launch repeats of each level for these runs (None: the space's)."""
    for label, params in runs:
        attrs = {"label": label, "measure_again": True} if measure_again else {"seed": label}
        if seed_label is not None and label == seed_label:
            attrs["seed"] = seed_label
        if repeats is not None:
            attrs[REPEATS_ATTR] = repeats
        study.enqueue_trial(params, user_attrs=attrs)


def run_queue(handle: StudyHandle, host: Host, events: SweepEvents) -> None:
    """Run exactly the queued trials and the retries their infrastructure faults queue (at most
    MAX_RETRIES each), nothing the sampler would propose. A retry queued after the count was taken
    once went unrun: `validate` reported a finalist on one good run of two, its retry left waiting.
    The study's budget grows to what ran plus what waits, where that passes it."""
    study = handle.study
    study.set_user_attr("controller", controller_identity())
    with interrupted_trials_failed(study):
        while waiting := len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,))):
            study.set_user_attr("budget", max(int(study.user_attrs.get("budget") or 0), evaluations(study) + waiting))
            study.optimize(make_objective(handle, host, events), n_trials=waiting, catch=(InfraError,),
                           gc_after_trial=False)


def measured_runs(study: optuna.Study) -> list[tuple[str, float | None]]:
    """(label, objective or None when the run failed) of every labelled, finished trial."""
    return [(label, values[0] if values else None) for label, values in measured_values(study)]


def measured_values(study: optuna.Study) -> list[tuple[str, list[float] | None]]:
    """(label, every objective's value, or None when the run failed) of every labelled, finished
    trial: the Pareto mode has two."""
    reference = reference_text(study)
    rejected = output_rejected(study)
    return [(t.user_attrs["label"], list(t.values) if is_feasible(t, reference, rejected) else None)
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if "label" in t.user_attrs]


def queued_params(trial: FrozenTrial) -> dict:
    """The config a trial was to measure: its suggested params, or (killed before it suggested
    any) the params it was queued with."""
    return dict(trial.params) or dict(trial.system_attrs.get("fixed_params") or {})


def fail_running_trials(study: optuna.Study) -> list[int]:
    """Mark the RUNNING trials interrupted and failed (a study with one controller: they are its
    own, or a dead one's); their numbers."""
    numbers = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        # Optuna has no public setter for another process's trial attrs; the storage API is stable.
        study._storage.set_trial_user_attr(t._trial_id, "interrupted", True)
        study.tell(t.number, state=TrialState.FAIL)
        numbers.append(t.number)
    return numbers


@contextmanager
def interrupted_trials_failed(study: optuna.Study) -> Iterator[None]:
    """Around study.optimize: a signal is held outside the objective (make_objective's is
    interruptible), since a KeyboardInterrupt within Optuna's ask or tell leaves the trial RUNNING
    or crashes Optuna's bookkeeping (UnboundLocalError); held, it is raised as the next objective
    starts (Optuna records that trial failed) or when optimize returns. A trial still RUNNING then
    is marked interrupted, as far as a storage locked by another process allows (`resume` marks
    it otherwise)."""
    try:
        with held_interrupts():
            yield
    except KeyboardInterrupt:
        with suppress(StorageBusy):
            fail_running_trials(study)
        raise
    except Exception as exc:  # Optuna's tell of the interrupted trial failed on a locked storage
        if not stopping():
            raise
        raise StorageBusy(f"the interrupted trial is left RUNNING for `sweeper resume` ({exc})") from exc


def recover_interrupted(study: optuna.Study, host: Host, grace_s: float) -> list[str]:
    """Stop servers left by a dead controller, mark its RUNNING trials failed, and queue every
    interrupted or infrastructure-failed trial for a re-run. Returns what was done."""
    # Every launch's intent is in the study before its spawn: a server is found by its run token
    # whatever the moment its controller died (one scan of the host for all of them).
    notes = stop_leftover_servers(host, study.get_trials(deepcopy=False), grace_s)
    notes += [f"trial {n} was interrupted: marked failed" for n in fail_running_trials(study)]
    already = {t.user_attrs.get("retry_of") for t in study.get_trials(deepcopy=False)}
    for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
        interrupted = t.user_attrs.get("interrupted")
        if ((interrupted or t.user_attrs.get("infra_error")) and t.number not in already
                and enqueue_retry(study, t.number, queued_params(t), t.user_attrs, counted=not interrupted)):
            notes.append(f"trial {t.number} queued to run again")
    return notes

