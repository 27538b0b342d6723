"""The Optuna study: storage, sampler, the objective around a trial, dedupe, budget, resume."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import warnings
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator, Protocol

import optuna
from optuna.trial import FrozenTrial, TrialState

import sweeper
from sweeper.levels import Level, is_rate
from sweeper.spec.hosts import HostSpec, load_hosts
from sweeper.spec.space import Space, space_fingerprint
from sweeper.engines import get_engine
from sweeper.engines import installed
from sweeper.engines.versions import deprecation_warnings
from sweeper.errors import InfraError, PortClash, UserError, did_you_mean, import_optional
from sweeper.hosts import Host, ServerProcess
from sweeper.hosts.base import LaunchIntent
from sweeper.hosts.gpu import MODEL_QUERY, GpuParseError, format_gpu_model
from sweeper.trial.gate import OutputSample
from sweeper.hosts.procfs import process_alive, read_stat
from sweeper.search.leftovers import INTENT_ATTR, build_intent_attr, stop_leftover_servers
from sweeper.search.pareto import dominated_verdict
from sweeper.search.reference import reference_samples, settle_reference as settle, use_reference_file
from sweeper.search.record import constraint_values, judge_level, objective_values, outcome_attrs
from sweeper.search.trials import best_trial, feasible_trials, is_evaluation, is_feasible
from sweeper.results.provenance import engine_provenance
from sweeper.redact import MASK, redact_env, redact_url
from sweeper.search.local import ensure_proposed_by
from sweeper.search.samplers import build_sampler
from sweeper.search.storage import StorageBusy, open_storage
from sweeper.interrupts import held_interrupts, interruptible, stopping
from sweeper.search.stored import output_rejected, reference_text
from sweeper.search.configs import config_key, suggest_config
from sweeper.trial.context import TrialContext
from sweeper.trial.pipeline import run_trial
from sweeper.outcomes import FailureKind, Stage

MAX_RETRIES = 2
optuna.logging.set_verbosity(optuna.logging.WARNING)


class FailedTrialLines(logging.Filter):
    """Optuna's warnings about a trial that raised, as one line: none for Ctrl-C (the CLI says it
    in one line), no traceback for the rest (an InfraError is retried and recorded; a bug raises
    on, with its traceback), and not the "failed with value None" that follows each."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and issubclass(record.exc_info[0], KeyboardInterrupt):
            return False
        record.exc_info, record.exc_text = None, None
        return not record.getMessage().endswith("failed with value None.")


logging.getLogger("optuna.study._optimize").addFilter(FailedTrialLines())


# ---------------------------------------------------------------- where a study lives

def study_dir(results_dir: Path, study_name: str) -> Path:
    return results_dir / study_name


def storage_url(results_dir: Path, study_name: str, storage: str | None) -> str:
    if storage:
        return storage
    path = (study_dir(results_dir, study_name) / "study.db").resolve()
    return f"sqlite:///{path}"


def study_exists(storage: optuna.storages.BaseStorage, name: str) -> bool:
    return any(s.study_name == name for s in optuna.get_all_study_summaries(storage))


# ---------------------------------------------------------------- samplers

# ---------------------------------------------------------------- events for the progress view

class SweepEvents(Protocol):
    """A run's progress; `name` is how a line names the trial (trial_title)."""

    def trial_started(self, name: str, evaluation: int, budget: int, config: dict) -> None: ...
    def stage(self, name: str, stage: str) -> None: ...
    def level(self, name: str, level: int, metrics: dict) -> None: ...
    def trial_finished(self, name: str, summary: str, best: float | None) -> None: ...


def trial_title(trial: optuna.Trial | FrozenTrial) -> str:
    """How progress lines name a trial: "trial 3"; a validation run by the sweep trial whose config
    it re-measures ("sweep trial 5", its label), not by the validation study's own numbering."""
    label = str(trial.user_attrs.get("label", ""))
    return f"sweep {label}" if label.startswith("trial ") else f"trial {trial.number}"


# ---------------------------------------------------------------- creating and loading

@dataclass
class StudyHandle:
    study: optuna.Study
    space: Space
    host_name: str
    host_spec: HostSpec
    results_dir: Path

    @property
    def name(self) -> str:
        return self.study.study_name

    @property
    def budget(self) -> int:
        return int(self.study.user_attrs["budget"])

    @property
    def dir(self) -> Path:
        return study_dir(self.results_dir, self.name)


def create_study(name: str, space: Space, space_path: Path, host_name: str, host_spec: HostSpec,
                 results_dir: Path, storage: str | None, budget: int, sampler: str | None = None,
                 enqueue_seeds: bool = True, space_text: str | None = None) -> StudyHandle:
    """`space_text`: the space's YAML when it does not come from reading `space_path` now (a
    validation study takes its parent's stored copy)."""
    url = storage_url(results_dir, name, storage)
    study_dir(results_dir, name).mkdir(parents=True, exist_ok=True)
    rdb = open_storage(url)
    if study_exists(rdb, name):
        if not never_started(optuna.load_study(study_name=name, storage=rdb)):
            raise UserError(f"study {name!r} already exists; continue it with `sweeper resume {name}` "
                            "or pick another --study name")
        optuna.delete_study(study_name=name, storage=rdb)  # a start that failed before its first trial
    goals = space.goals  # one, or the Pareto mode's two
    study = optuna.create_study(study_name=name, storage=rdb, directions=[g.direction for g in goals])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([g.name for g in goals])
    attrs = {
        "sweeper_version": sweeper.__version__,
        "space_path": str(space_path.resolve()),
        "space_text": space_text if space_text is not None else space_path.read_text(),
        "space_hash": space_fingerprint(space),
        "space": space.model_dump(mode="json"),
        "host_name": host_name,
        "host_spec": stored_host_spec(host_spec),
        "budget": budget,
        "sampler": sampler or space.search.sampler,
        "storage": redact_url(url),
        "created_at": time.time(),
        **engine_provenance(space),  # engine_version, gpu_model ("" when not known)
    }
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    (study_dir(results_dir, name) / "space.yaml").write_text(attrs["space_text"])
    if enqueue_seeds:
        enqueue_space_seeds(study, space)
    return StudyHandle(study, space, host_name, host_spec, results_dir)


def stored_host_spec(spec: HostSpec) -> dict:
    """The host entry as the study keeps it: secrets masked, and `gpus` only where the entry gave
    it (a resumed study refuses no config for a GPU count its host never stated)."""
    unstated = set() if spec.declared_gpus is not None else {"gpus"}
    return {**spec.model_dump(mode="json", exclude=unstated), "env": redact_env(spec.env)}


def never_started(study: optuna.Study) -> bool:
    """No trial ever ran (at most queued seeds) and no live controller holds it: a start that
    failed (an engine missing, a flag refused), which the same command may create again."""
    return (all(t.state == TrialState.WAITING for t in study.get_trials(deepcopy=False))
            and not controller_alive(study.user_attrs.get("controller")))


def enqueue_space_seeds(study: optuna.Study, space: Space) -> None:
    """The space's seeds, queued to run before anything the sampler proposes."""
    for seed in space.seeds:
        study.enqueue_trial(seed.params, user_attrs={"seed": seed.name})


def host_spec_for_resume(attrs: dict, hosts_path: Path) -> HostSpec:
    """The stored host spec; secret env values (never stored) come back from the hosts file."""
    spec = HostSpec.model_validate(attrs["host_spec"])
    masked = sorted(k for k, v in spec.env.items() if v == MASK)
    if not masked:
        return spec
    name = attrs["host_name"]
    hosts = load_hosts(hosts_path).hosts if hosts_path.is_file() else {}
    if name not in hosts or any(k not in hosts[name].env for k in masked):
        raise UserError(f"host {name!r} has secret env values that are not stored in the study "
                        f"({', '.join(masked)}): pass --hosts with a hosts file that defines them")
    return spec.model_copy(update={"env": {**spec.env, **{k: hosts[name].env[k] for k in masked}}})


def study_servers(study: optuna.Study, host_name: str) -> list[ServerProcess]:
    """Every server this study recorded on `host_name`."""
    return [ServerProcess.from_dict(t.user_attrs["process"]) for t in study.get_trials(deepcopy=False)
            if t.user_attrs.get("process", {}).get("host") == host_name]


def study_names(results_dir: Path, storage: str | None) -> list[str]:
    """The studies there are: in `storage`, or (by default) one SQLite file per folder of `results_dir`."""
    if storage:
        return sorted(optuna.get_all_study_names(open_storage(storage)))
    return sorted(p.parent.name for p in results_dir.glob("*/study.db")) if results_dir.is_dir() else []


def format_known_studies(names: list[str], wanted: str | None = None) -> str:
    """'studies there: a, b (did you mean 'a'?)' for an error about a study not found."""
    if not names:
        return "there is no study there yet"
    return f"studies there: {', '.join(names)}" + (did_you_mean(wanted, names) if wanted else "")


def open_study_storage(name: str, results_dir: Path, storage: str | None) -> optuna.storages.RDBStorage:
    """The storage that holds the study `name`; a UserError where it does not (naming those there are)."""
    url = storage_url(results_dir, name, storage)
    if storage is None and not Path(url.removeprefix("sqlite:///")).exists():
        raise UserError(f"no study {name!r} under {results_dir}; "
                        f"{format_known_studies(study_names(results_dir, None), name)}")
    rdb = open_storage(url)
    if not study_exists(rdb, name):
        raise UserError(f"no study named {name!r} in {redact_url(url)}; "
                        f"{format_known_studies(sorted(optuna.get_all_study_names(rdb)), name)}")
    return rdb


def load_study(name: str, results_dir: Path, storage: str | None) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=open_study_storage(name, results_dir, storage))


# ---------------------------------------------------------------- the controller lock

def controller_identity() -> dict:
    stat = read_stat(os.getpid())
    return {"hostname": socket.gethostname(), "pid": os.getpid(),
            "start_ticks": stat.start_ticks if stat else 0}


def controller_alive(identity: dict | None) -> bool:
    """Whether the controller that last ran this study is still running (on this machine)."""
    if not identity or identity.get("hostname") != socket.gethostname():
        return False
    if identity.get("pid") == os.getpid():
        return False
    return process_alive(int(identity["pid"]), identity.get("start_ticks"))


# ---------------------------------------------------------------- running

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
    """sweeper/search/reference.py: the named seed's outputs, or two agreeing configs', become the reference."""
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
    from sweeper.search.record import worst_value

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


def probe_gpu_model(host: Host) -> str:
    """The host's GPUs and driver as nvidia-smi names them; '' where it has none (a CPU host)."""
    try:
        result = host.run(MODEL_QUERY, timeout_s=60)
        return format_gpu_model(result.stdout) if result.returncode == 0 else ""
    except (OSError, GpuParseError):
        return ""


def installed_flags(study: optuna.Study, space: Space, host: Host) -> dict[str, list[str] | None]:
    """The installed engine's flags from its --help, read once per engine version and kept in the
    study; the space's fixed flags are checked at once (every trial would fail on them)."""
    engine = get_engine(space.engine)
    python = host.python()
    version_text = installed.version_text(installed.read_version(host, engine, python))
    key = f"{space.engine} {version_text or '?'} ({python})"
    cached = study.user_attrs.get("engine_flags")
    if cached and cached.get("key") == key:
        return cached["flags"]
    flags = installed.read_help_flags(host, engine, python)
    fixed = installed.fixed_argv(space, engine, python)
    if problems := installed.argv_problems(fixed, engine, flags):
        raise UserError(f"the space's fixed flags do not fit {key}: {'; '.join(problems)}")
    study.set_user_attr("engine_flags", {"key": key, "flags": flags})
    study.set_user_attr("engine_version", version_text)
    if space.engine != "sim" and not study.user_attrs.get("gpu_model"):
        study.set_user_attr("gpu_model", probe_gpu_model(host))
    # deprecations are dated by the engine's own releases (the simulator's version is sweeper's)
    space_flags = list(fixed) + [p.flag for p in (*space.parameters.values(), *space.derived.values()) if p.flag]
    if engine.flag_family == space.engine and (
            deprecated := deprecation_warnings(space_flags, engine.flag_family, version_text)):
        study.set_user_attr("engine_warnings", deprecated)  # `sweeper show` lists them
    return flags


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
    """Run exactly the queued trials (and nothing the sampler would propose)."""
    study = handle.study
    study.set_user_attr("controller", controller_identity())
    waiting = len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
    if waiting:
        with interrupted_trials_failed(study):
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


# ---------------------------------------------------------------- recovery after a dead controller

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
