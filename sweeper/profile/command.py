"""`sweeper profile`: pick a trial of a study, profile its config on the study's host, and save
the trace and the tables under results/<study>/trials/<n>/profile/."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import optuna

from sweeper.engines import get_engine
from sweeper.errors import UserError
from sweeper.hosts import Host, ServerProcess, open_host
from sweeper.hosts.base import LaunchIntent
from sweeper.profile.outputs import build_profile_record, build_profile_summary, format_profile_text
from sweeper.profile.run import ProfileContext, ProfileRequest, profile_config, relative_paths
from sweeper.profile.trace import (
    TraceError, group_shares, is_trace_file, load_trace, summarize_traces,
)
from sweeper.study.recovery import intent_of_record, stop_found_servers
from sweeper.study.reference import reference_samples
from sweeper.study.trials import best_trial
from sweeper.search.configs import with_derived
from sweeper.study.store import controller_alive, controller_identity, host_spec_for_resume, installed_flags, study_dir, study_servers
from sweeper.study.stored import parse_stored_space

PROFILE_SERVER_ATTR = "profile_server"  # the server a running `sweeper profile` started
PROFILE_INTENT_ATTR = "profile_launch_intent"  # its launch intent, written before the spawn
PROFILE_ATTR_PREFIX = "profile:"  # + trial number: the latest profile's summary, kept in the study


@dataclass(frozen=True)
class ProfileResult:
    dir: Path
    text: str
    record: dict[str, Any]


def chosen_trial(study: optuna.Study, number: int | None, best: bool) -> optuna.trial.FrozenTrial:
    if (number is None) == (not best):
        raise UserError("give exactly one of --trial N or --best")
    if best:
        trial = best_trial(study)
        if trial is None:
            raise UserError(f"study {study.study_name!r} has no feasible trial yet; pick one with --trial N")
        return trial
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    if number not in trials:
        raise UserError(f"study {study.study_name!r} has no trial {number} (it has 0..{max(trials, default=-1)})")
    return trials[number]


def trial_config(space, trial: optuna.trial.FrozenTrial, trial_dir: Path) -> dict[str, Any]:
    """The config the trial ran: its config.json (derived values included) or its parameters."""
    path = trial_dir / "config.json"
    if path.is_file():
        return json.loads(path.read_text())
    if not trial.params:
        raise UserError(f"trial {trial.number} has no parameters (it never ran)")
    return with_derived(space, dict(trial.params))


def profile_study_trial(study: optuna.Study, results: Path, hosts_path: Path, number: int | None, best: bool,
                        concurrency: int | None, seconds: float, top: int,
                        on_step: Callable[[str], None] = lambda message: None) -> ProfileResult:
    attrs = study.user_attrs
    if controller_alive(attrs.get("controller")):
        # Its GPU gate and ours would each take the other's server for a leftover and stop it.
        raise UserError(f"study {study.study_name!r} is being run by pid {attrs['controller']['pid']}; "
                        "profile it when that run has stopped")
    space = parse_stored_space(attrs)
    trial = chosen_trial(study, number, best)
    trial_dir = study_dir(results, study.study_name) / "trials" / str(trial.number)
    config = trial_config(space, trial, trial_dir)
    level = profile_level(study.study_name, space, concurrency, seconds)
    host_spec = host_spec_for_resume(attrs, hosts_path)
    host_name = attrs["host_name"]
    host = open_host(host_name, host_spec)
    study.set_user_attr("controller", controller_identity())  # a `resume` meanwhile is refused
    try:
        _stop_leftover_profile_server(study, host, space.launch.stop_grace_s, on_step)

        def intended(intent: LaunchIntent) -> None:
            study.set_user_attr(PROFILE_INTENT_ATTR, intent.to_dict())  # found by its token whenever we die

        def stopped(proc: ServerProcess) -> None:
            study.set_user_attr(PROFILE_SERVER_ATTR, None)
            study.set_user_attr(PROFILE_INTENT_ATTR, None)

        def started(proc: ServerProcess) -> None:
            study.set_user_attr(PROFILE_SERVER_ATTR, proc.to_dict())  # found again after a crash

        def known() -> list[ServerProcess]:
            return study_servers(study, host_name)

        ctx = ProfileContext(
            space=space, engine=get_engine(space.engine), host=host, host_spec=host_spec,
            profile_dir=trial_dir / "profile", reference_samples=reference_samples(study), known_servers=known,
            known_flags=installed_flags(study, space, host), on_intent=intended, on_started=started,
            engine_version=str(study.user_attrs.get("engine_version") or ""),
            on_stopped=stopped, on_step=on_step)
        started_at = time.time()
        run = profile_config(ctx, config, ProfileRequest(concurrency=level, seconds=seconds))
    finally:
        host.close()
    meta = {
        "study": study.study_name, "trial": trial.number, "config": config, "host": host_name,
        "engine": space.engine, "concurrency": level, "seconds": seconds, "started_at": started_at,
        "load": run.load, "warnings": run.warnings,
        "trace_files": relative_paths(run.trace_files, ctx.profile_dir),
    }
    return save_profile(study, trial.number, ctx.profile_dir, meta, run, top)


def profile_level(study_name: str, space, concurrency: int | None, seconds: float) -> int:
    """The closed-loop concurrency a profile runs at (--concurrency, else the objective's level); a
    request it cannot run is refused before anything launches."""
    if not concurrency and space.workload.open_loop:
        raise UserError(f"study {study_name!r} has open-loop levels (workload.request_rates); a profile "
                        "runs a closed loop: give --concurrency C")
    level = concurrency or space.objective_level
    if level < 1:
        raise UserError(f"--concurrency: expected a number >= 1, got {level}")
    if seconds <= 0:
        raise UserError(f"--seconds: expected a duration > 0, got {seconds}")
    return level


def save_profile(study: optuna.Study, number: int, profile_dir: Path, meta: dict, run, top: int) -> ProfileResult:
    """profile.json and profile.txt written in the trial's profile folder, the summary kept in the study."""
    record = build_profile_record(meta, run.table, run.groups, run.busy)
    title = (f"kernel profile of trial {number} of study {study.study_name} at C={meta['concurrency']} for "
             f"{run.load['seconds']:.1f}s ({run.load['completed']} requests)")
    text = format_profile_text(title, run.table, run.groups, run.busy, top)
    (profile_dir / "profile.json").write_text(json.dumps(record, indent=2))
    (profile_dir / "profile.txt").write_text(text)
    study.set_user_attr(f"{PROFILE_ATTR_PREFIX}{number}", build_profile_summary(record))
    return ProfileResult(profile_dir, text, record)


def _stop_leftover_profile_server(study: optuna.Study, host: Host, grace_s: float,
                                  on_step: Callable[[str], None]) -> None:
    """A profile whose controller died leaves its launch intent (and maybe its server) recorded:
    stop that server, found by its run token (only processes that carry it are signalled)."""
    attrs, host_name = study.user_attrs, study.user_attrs.get("host_name")
    intents = [build(data) for data, build in ((attrs.get(PROFILE_INTENT_ATTR), LaunchIntent.from_dict),
                                               (attrs.get(PROFILE_SERVER_ATTR), intent_of_record))
               if data and data.get("host") == host_name]
    if not intents:
        return
    for proc in stop_found_servers(host, intents, grace_s):
        on_step(f"stopped the server an interrupted profile left (pgid {proc.pgid})")
    study.set_user_attr(PROFILE_SERVER_ATTR, None)
    study.set_user_attr(PROFILE_INTENT_ATTR, None)


def trace_files_in(paths: list[Path]) -> list[Path]:
    """The given files, and the trace files inside given folders (all ranks of one profile)."""
    found = []
    for path in paths:
        if path.is_dir():
            inside = sorted(p for p in path.rglob("*") if p.is_file() and is_trace_file(p.name))
            if not inside:
                raise UserError(f"{path}: no trace files (*.json, *.json.gz) in this folder")
            found += inside
        elif path.is_file():
            found.append(path)
        else:
            raise UserError(f"{path}: no such file or folder")
    return found


def summarize_trace_files(paths: list[Path], top: int) -> ProfileResult:
    """The kernel table of trace files already on disk (any torch profiler chrome trace)."""
    files = trace_files_in(paths)
    try:
        table, busy = summarize_traces(load_trace(path) for path in files)
    except TraceError as exc:
        raise UserError(str(exc)) from None
    groups = group_shares(table)
    record = build_profile_record({"trace_files": [str(p) for p in files]}, table, groups, busy)
    title = f"kernel table of {len(files)} trace file(s)"
    return ProfileResult(files[0].parent, format_profile_text(title, table, groups, busy, top), record)
