"""The objective around one trial: dedupe, the reference gate, the run, its record, retries of an
infrastructure failure, and the budget callback."""

from __future__ import annotations

import json
from contextlib import nullcontext, suppress
from pathlib import Path
from typing import Callable, ContextManager, Protocol

import optuna
from optuna.trial import FrozenTrial, TrialState

from sweeper.levels import Level, is_rate
from sweeper.spec.hosts import HostSpec
from sweeper.spec.space import Space
from sweeper.engines import get_engine
from sweeper.errors import InfraError, PortClash
from sweeper.hosts import Host, ServerProcess
from sweeper.hosts.base import LaunchIntent
from sweeper.trial.gate import OutputSample
from sweeper.study.recovery import INTENT_ATTR, build_intent_attr
from sweeper.search.pareto import dominated_verdict
from sweeper.study.reference import reference_samples, settle_reference as settle, use_reference_file
from sweeper.study.record import constraint_values, judge_level, objective_values, outcome_attrs
from sweeper.study.trials import best_trial, feasible_trials, is_evaluation
from sweeper.search.local_search import ensure_proposed_by
from sweeper.study.storage import StorageBusy
from sweeper.interrupts import interruptible
from sweeper.search.configs import config_key, suggest_config
from sweeper.trial.context import TrialContext
from sweeper.trial.pipeline import run_trial
from sweeper.outcomes import FailureKind, Stage
from sweeper.study.store import StudyHandle, SweepEvents, installed_flags, study_servers, trial_title
from sweeper.study.record import worst_value


MAX_RETRIES = 2


def evaluations(study: optuna.Study) -> int:
    """Real evaluations so far: finished trials that launched a server (duplicates are free)."""
    return sum(1 for t in study.get_trials(deepcopy=False) if is_evaluation(t))


def find_duplicate(study: optuna.Study, key: str, number: int) -> FrozenTrial | None:
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        if t.number != number and t.user_attrs.get("config_key") == key and "duplicate_of" not in t.user_attrs:
            return t
    return None


def passed_gate(outcome) -> bool:
    """The trial's outputs passed the correctness gate (a later load or stop failure does not make
    them wrong: they can still be the reference)."""
    return bool(outcome.output_samples) and (outcome.failure is None or outcome.failure.stage in (Stage.LOAD, Stage.STOP))


def settle_reference(handle: StudyHandle, trial: optuna.Trial, samples: list[dict] | None) -> None:
    """sweeper/study/reference.py: the named seed's outputs, or two agreeing configs', become the reference."""
    settle(handle.study, handle.space, handle.dir, trial,
           [OutputSample.from_dict(s) for s in samples] if samples else None)


class TrialGate(Protocol):
    """What a shared study (sweeper/fleet/workers.py) adds around a trial: a claim instead of the plain
    dedupe, and host leases while the server runs."""

    def admit(self, trial: optuna.Trial, config: dict, key: str) -> FrozenTrial | None: ...
    def hold(self, trial: optuna.Trial, config: dict) -> ContextManager[HostSpec]: ...
    def server_started(self, trial: optuna.Trial, proc: ServerProcess) -> None: ...


REPEATS_ATTR = "repeats"  # a queued run's in-launch repeats per level (the campaign's choice)


def space_for_trial(space: Space, trial: optuna.Trial) -> Space:
    """The space a trial runs: the study's, with the in-launch repeats it was queued with."""
    repeats = trial.user_attrs.get(REPEATS_ATTR)
    if not repeats or repeats == space.workload.repeats:
        return space
    return space.model_copy(update={"workload": space.workload.model_copy(update={"repeats": int(repeats)})})


def make_objective(handle: StudyHandle, host: Host, events: SweepEvents,
                   gate: TrialGate | None = None) -> Callable[[optuna.Trial], float | list[float]]:
    """The function Optuna calls per trial: one value, or the Pareto mode's two."""
    space, study = handle.space, handle.study
    engine = get_engine(space.engine)
    known_flags = installed_flags(study, space, host)
    space_path = study.user_attrs.get("space_path")
    use_reference_file(study, space, handle.dir, Path(space_path).parent if space_path else None)

    def objective(trial: optuna.Trial) -> float | list[float]:
        try:
            with interruptible():  # a Ctrl-C held since Optuna's ask is raised here
                return run_one(trial)
        except KeyboardInterrupt:
            with suppress(StorageBusy):  # locked by another process: `resume` marks the trial instead
                trial.set_user_attr("interrupted", True)  # the server was stopped by run_trial's finally
            raise

    def run_one(trial: optuna.Trial) -> float | list[float]:
        config = suggest_config(trial, space)
        key = config_key(config)
        trial.set_user_attr("config_key", key)
        trial.set_user_attr("host", handle.host_name)
        ensure_proposed_by(trial, study.user_attrs.get("sampler", space.search.sampler))
        repeat = trial.user_attrs.get("measure_again")  # ablation and finalist repeats are measured
        if not repeat and (duplicate := find_duplicate(study, key, trial.number) if gate is None
                           else gate.admit(trial, config, key)):
            return _copy_duplicate(trial, duplicate)
        if not repeat and (reason := (study.user_attrs.get("warm_start") or {}).get("broken", {}).get(key)):
            return _skip_known_broken(trial, space, reason)
        events.trial_started(trial_title(trial), evaluations(study) + 1, handle.budget, config)
        trial_dir = handle.dir / "trials" / str(trial.number)
        trial_dir.mkdir(parents=True, exist_ok=True)
        (trial_dir / "config.json").write_text(json.dumps(config, indent=2))
        watch = TrialWatch(handle, trial, events, gate)
        try:
            with gate.hold(trial, config) if gate is not None else nullcontext(handle.host_spec) as host_spec:
                ctx = TrialContext(space=space_for_trial(space, trial), engine=engine, host=host, host_spec=host_spec,
                                   trial_dir=trial_dir, reference_samples=reference_samples(study),
                                   on_stage=watch.on_stage, on_intent=watch.on_intent, on_started=watch.on_started,
                                   on_level=watch.on_level,
                                   known_servers=lambda: study_servers(study, handle.host_name),
                                   known_flags=known_flags,
                                   avoid_ports=frozenset(trial.user_attrs.get("avoid_ports", ())))
                outcome = run_trial(ctx, config)
        except InfraError as exc:
            trial.set_user_attr("infra_error", str(exc))
            attrs = {**trial.user_attrs, **retry_attrs(exc, trial.user_attrs)}
            enqueue_retry(study, trial.number, trial.params, attrs)
            raise
        values = record_outcome(handle, trial, config, outcome, trial_dir)
        events.trial_finished(trial_title(trial), _summary(outcome, values), _best_value(study))
        if outcome.failure and outcome.failure.kind == FailureKind.ABANDONED:
            raise optuna.TrialPruned(outcome.failure.message)  # a partial result, recorded as such
        return values if space.is_pareto else values[0]

    return objective


class TrialWatch:
    """What the study hears from a running trial: its stage and server (kept in the trial, so
    `show` and `resume` see them) and each level's metrics (reported to the pruner, or judged
    against the front in the Pareto mode)."""

    def __init__(self, handle: StudyHandle, trial: optuna.Trial, events: SweepEvents, gate: TrialGate | None):
        self.handle, self.trial, self.events, self.gate = handle, trial, events, gate
        self.measured: dict[Level, dict] = {}

    def on_stage(self, stage: str) -> None:
        with suppress(StorageBusy):  # what `show` displays; never a reason to skip a stage (the stop)
            self.trial.set_user_attr("stage", stage)
        self.events.stage(trial_title(self.trial), stage)

    def on_intent(self, intent: LaunchIntent) -> None:
        self.trial.set_user_attr(INTENT_ATTR, build_intent_attr(intent, self.trial.number))

    def on_started(self, proc: ServerProcess) -> None:
        self.trial.set_user_attr("process", proc.to_dict())
        if self.gate is not None:
            self.gate.server_started(self.trial, proc)

    def on_level(self, level: Level, metrics: dict):
        """None to go on, or the Failure that abandons the rest of the ladder."""
        self.measured[level] = metrics
        self.events.level(trial_title(self.trial), level, metrics)
        space, study = self.handle.space, self.handle.study
        if space.is_pareto:  # Optuna has no intermediate values in multi-objective studies
            return judge_level(space, level, metrics, None) or dominated_verdict(space, self.measured,
                                                                                 _front_points(study))
        value = metrics.get(space.objective.metric)
        if value is not None and metrics.get("valid"):
            # Optuna's steps are ints: C itself, or a rate's place in the ladder (1, 2, ...)
            step = space.workload.levels.index(level) + 1 if is_rate(level) else level
            self.trial.report(float(value), step=step)
        return judge_level(space, level, metrics, _best_value(study))


def record_outcome(handle: StudyHandle, trial: optuna.Trial, config: dict, outcome, trial_dir: Path) -> list[float]:
    """The outcome into the study (attrs, constraints, the reference) and outcome.json; its values."""
    for name, value in outcome_attrs(outcome).items():
        trial.set_user_attr(name, value)
    for name, value in constraint_values(outcome, handle.space).items():
        trial.set_constraint(name, value)
    settle_reference(handle, trial, outcome.output_samples if passed_gate(outcome) else None)
    values = objective_values(handle.space, outcome)
    (trial_dir / "outcome.json").write_text(json.dumps(
        {"config": config, "value": values[0], "values": values, **outcome_attrs(outcome)}, indent=2, default=str))
    trial.set_user_attr("stage", "done")
    return values


def _copy_duplicate(trial: optuna.Trial, duplicate: FrozenTrial) -> float | list[float]:
    """The earlier trial's values (both, in the Pareto mode) and constraints."""
    trial.set_user_attr("duplicate_of", duplicate.number)
    if duplicate.state == TrialState.PRUNED:
        raise optuna.TrialPruned(f"duplicate of abandoned trial {duplicate.number}")
    for name, value in (duplicate.constraints or {}).items():
        trial.set_constraint(name, value)
    return list(duplicate.values) if len(duplicate.values) > 1 else duplicate.values[0]


def _skip_known_broken(trial: optuna.Trial, space: Space, reason: str) -> float | list[float]:
    """A config an earlier study proved broken (warm start): infeasible without a launch, so it
    costs no evaluation and the sampler still learns the region fails."""
    trial.set_user_attr("skipped_broken", reason)
    trial.set_user_attr("stage", "done")
    trial.set_constraint("config_fault", 1.0)
    trial.set_constraint("slo", 0.0)
    values = [worst_value(g.direction) for g in space.goals]
    return values if space.is_pareto else values[0]


def _summary(outcome, values: list[float]) -> str:
    if outcome.failure:
        return f"infeasible: {outcome.failure.stage}/{outcome.failure.kind}"
    return ", ".join(f"{v:.2f}" for v in values)


def _best_value(study: optuna.Study) -> float | None:
    """The best first objective (in the Pareto mode: the front's best throughput)."""
    best = best_trial(study)
    return best.values[0] if best else None


def _front_points(study: optuna.Study) -> list[tuple[int, float, float]]:
    """(trial, throughput, latency) of the feasible trials: what a Pareto-mode trial must beat."""
    return [(t.number, t.values[0], t.values[1]) for t in feasible_trials(study)]


def retry_attrs(exc: InfraError, user_attrs: dict) -> dict:
    """What the retry of a trial that failed with `exc` must know: after a port clash, the base
    ports to stay off (the clashed one added to those its own retries already avoid)."""
    if isinstance(exc, PortClash):
        return {"avoid_ports": sorted({*user_attrs.get("avoid_ports", ()), exc.port})}
    return {}


def enqueue_retry(study: optuna.Study, number: int, params: dict, user_attrs: dict, counted: bool = True) -> bool:
    """Queue the config of a trial that failed for infrastructure reasons, at most MAX_RETRIES times.
    An uncounted retry (the controller died or was stopped: nothing the config did) keeps its
    attempt number, so a config interrupted any number of times is still measured."""
    attempt = int(user_attrs.get("attempt", 0)) + (1 if counted else 0)
    if counted and attempt > MAX_RETRIES:
        return False
    # a re-measured run (finalist, ablation lever) keeps its label and stays a re-measurement
    carried = {k: user_attrs[k] for k in ("seed", "avoid_ports", "label", "measure_again") if k in user_attrs}
    study.enqueue_trial(params, user_attrs={**carried, "retry_of": number, "attempt": attempt})
    return True


class BudgetCallback:
    """Stops the study once the budget of real evaluations is spent (across restarts)."""

    def __init__(self, budget: int):
        self.budget = budget

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if evaluations(study) >= self.budget:
            study.stop()

