"""A study in its storage: create, load and list studies, their space and host, the controller alive
or not, and the installed engine's flags kept in the study."""

from __future__ import annotations

import logging
import os
import socket
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import optuna
from optuna.trial import FrozenTrial, TrialState

import sweeper
from sweeper.spec.hosts import HostSpec, load_hosts
from sweeper.spec.space import Space, space_fingerprint
from sweeper.engines import get_engine
from sweeper.engines import installed
from sweeper.engines.versions import deprecation_warnings
from sweeper.errors import UserError, did_you_mean
from sweeper.hosts import Host, ServerProcess
from sweeper.hosts.gpu import MODEL_QUERY, GpuParseError, format_gpu_model
from sweeper.hosts.procfs import process_alive, read_stat
from sweeper.study.provenance import engine_provenance
from sweeper.redact import MASK, redact_env, redact_url
from sweeper.study.storage import open_storage

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


def study_dir(results_dir: Path, study_name: str) -> Path:
    return results_dir / study_name


def storage_url(results_dir: Path, study_name: str, storage: str | None) -> str:
    if storage:
        return storage
    path = (study_dir(results_dir, study_name) / "study.db").resolve()
    return f"sqlite:///{path}"


def study_exists(storage: optuna.storages.BaseStorage, name: str) -> bool:
    return any(s.study_name == name for s in optuna.get_all_study_summaries(storage))


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

