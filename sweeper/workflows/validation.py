"""Finalist re-validation as functions `validate` and `campaign` share: the validation study (the
source's stored space and reference, no seeds, no dedupe), its rows stored back in the source, and
the campaign's adaptive rule for what to measure next (pure)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import optuna
from optuna.trial import TrialState

from sweeper.levels import Level, level_key
from sweeper.spec.hosts import HostSpec
from sweeper.workflows.ablation import ALPHA, Measured, mean_ci, summarize_finalists, welch_p
from sweeper.study.noise import NOISE_FLOOR_ATTR, NoiseFloor, pooled_noise
from sweeper.study.stored import parse_stored_space
from sweeper.study.store import StudyHandle, create_study
from sweeper.study.runs import enqueue_runs, measured_runs, measured_values

REFERENCE_ATTRS = ("reference_text", "reference_samples", "reference_source")
SOURCE_ATTR = "validation_of"  # the last write of a validation study's set-up: without it, the set-up was cut short
PLANNED_ATTR = "planned_runs"  # labels of every run planned, in order, written before they are queued
PLANNED_REPEATS_ATTR = "planned_repeats"  # in-launch repeats of each planned run (None: the space's)
LAUNCH_STAGES = ("preflight", "launch", "wait_ready", "check_output", "stop")  # what a launch costs besides its load


def create_validation_study(source: optuna.Study, name: str, results: Path, storage: str | None,
                            host_name: str, host_spec: HostSpec, budget: int) -> StudyHandle:
    """A study that re-measures `source`'s configs: the source's stored copy of the space (never the
    file: it may have changed or gone) and its reference output, so a re-run is judged alike."""
    attrs = source.user_attrs
    handle = create_study(name, parse_stored_space(attrs), Path(attrs["space_path"]), host_name, host_spec,
                          results, storage, budget, "random", enqueue_seeds=False, space_text=attrs["space_text"])
    for key in REFERENCE_ATTRS:
        handle.study.set_user_attr(key, attrs.get(key))
    handle.study.set_user_attr(SOURCE_ATTR, source.study_name)
    return handle


def is_half_made(study: optuna.Study) -> bool:
    """A validation study whose creation was killed before its set-up ended (nothing is queued
    before then, so nothing measured is lost by making it again)."""
    return SOURCE_ATTR not in study.user_attrs and not study.get_trials(deepcopy=False)


def plan_runs(study: optuna.Study, labels: list[str], repeats: int | None = None) -> None:
    """Intent before action: a round's runs (and their in-launch repeats) are written into the
    study before any is queued, so a resume queues what was planned (not what it would plan from
    a round half queued)."""
    planned = study.user_attrs.get(PLANNED_ATTR, [])
    earlier = study.user_attrs.get(PLANNED_REPEATS_ATTR) or [None] * len(planned)
    study.set_user_attr(PLANNED_REPEATS_ATTR, [*earlier, *([repeats] * len(labels))])
    study.set_user_attr(PLANNED_ATTR, [*planned, *labels])


def enqueue_planned(study: optuna.Study, params: dict[str, dict]) -> list[str]:
    """Queue the planned runs not queued yet (all, or those a kill in the middle of queueing left
    out); `params`: label -> config. Returns the labels queued. The queued runs (retries aside)
    are a prefix of the plan: they are queued in its order."""
    if PLANNED_ATTR not in study.user_attrs:
        return []  # a study made before plans were written: its runs were queued at once
    planned = study.user_attrs[PLANNED_ATTR]
    queued = [t.user_attrs["label"] for t in study.get_trials(deepcopy=False)
              if "label" in t.user_attrs and "retry_of" not in t.user_attrs]
    if queued != planned[:len(queued)]:
        raise RuntimeError(f"validation study {study.study_name!r}: queued runs {queued} are not the "
                           f"start of the planned {planned}")
    missing = planned[len(queued):]
    repeats = (study.user_attrs.get(PLANNED_REPEATS_ATTR) or [None] * len(planned))[len(queued):]
    for label, count in zip(missing, repeats):
        enqueue_runs(study, [(label, params[label])], repeats=count)
    return missing


def record_validation(source: optuna.Study, validation: optuna.Study, maximize: bool,
                      verdict: dict | None = None) -> list[dict]:
    """The finalists' rows (mean and 95% CI, best first), kept in the source as `validation`
    (what `best --json`, `show` and the report read)."""
    rows = summarize_finalists([Measured(label, value) for label, value in measured_runs(validation)], maximize)
    record = {"study": validation.study_name, "rows": rows}
    if verdict is not None:
        record["verdict"] = verdict
    source.set_user_attr("validation", record)
    return rows


def launch_repeats(study: optuna.Study, level: Level) -> dict[str, list[list[float]]]:
    """label -> each feasible launch's in-launch repeats of the objective at `level` (the level's
    `repeat_output_throughputs` where the objective is its output tok/s, else the one value)."""
    labelled = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if "label" in t.user_attrs]
    out: dict[str, list[list[float]]] = {}
    for trial, (_, values) in zip(labelled, measured_values(study)):  # the same trials, in the same order
        if values is None:
            continue
        metrics = (trial.user_attrs.get("levels") or {}).get(level_key(level)) or {}
        repeats = metrics.get("repeat_output_throughputs")
        same = repeats and metrics.get("output_throughput") == values[0]
        out.setdefault(trial.user_attrs["label"], []).append(list(repeats) if same else [values[0]])
    return out


def launch_costs(study: optuna.Study) -> tuple[float, float]:
    """Mean seconds of a launch (its stages besides the load) and of one in-launch repeat of the
    load, over the study's completed runs; (0, 0) before any."""
    launches, repeats = [], []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        stages = trial.user_attrs.get("stage_seconds") or {}
        if "load" not in stages:
            continue
        launches.append(sum(stages.get(name, 0.0) for name in LAUNCH_STAGES))
        levels = trial.user_attrs.get("levels") or {}
        count = max((int(m.get("repeats") or 1) for m in levels.values()), default=1)
        repeats.append(stages["load"] / count)
    if not launches:
        return 0.0, 0.0
    return statistics.fmean(launches), statistics.fmean(repeats)


def record_noise_floor(studies: Sequence[optuna.Study], floor: NoiseFloor) -> None:
    """The noise floor into each study (the sweep's, where results/ shows it, and the validation's)."""
    for study in studies:
        study.set_user_attr(NOISE_FLOOR_ATTR, floor.as_attr())


def noise_floor_of(study: optuna.Study, level: Level) -> NoiseFloor:
    return pooled_noise(launch_repeats(study, level), level_key(level))


@dataclass(frozen=True)
class Plan:
    """What the adaptive validation does next: `runs` (labels, one round in interleaved order), or
    stop with a verdict (`runs` empty)."""

    runs: list[str]
    verdict: dict | None = None


def _values(runs: Sequence[Measured]) -> dict[str, list[float]]:
    by_label: dict[str, list[float]] = {}
    for run in runs:
        by_label.setdefault(run.label, [])
        if run.value is not None:
            by_label[run.label].append(run.value)
    return by_label


def plan_validation(runs: Sequence[Measured], candidates: Sequence[tuple[str, float]], maximize: bool,
                    max_repeats: int, launches_left: int, time_left_s: float | None) -> Plan:
    """The next round of an adaptive validation, or its verdict.

    The finalists measured so far are ranked by their means; the winner is separated when Welch's
    test puts it apart from the runner-up (p < ALPHA). Until then another round re-measures the
    winner and every finalist still tied with it, and a sweep candidate not yet re-measured joins
    when its single sweep value lies inside (or beyond) the winner's 95% CI (it could be the
    winner). It stops as a tie when a contender reached `max_repeats` runs, or the launch or time
    budget cannot pay for the round. `candidates`: (label, sweep value) in sweep rank order."""
    measured = _values(runs)
    tried = {label: len([r for r in runs if r.label == label]) for label in measured}
    sign = 1 if maximize else -1
    ranked = sorted((label for label, values in measured.items() if values),
                    key=lambda label: -sign * statistics.fmean(measured[label]))
    untried = [(label, value) for label, value in candidates if label not in measured]
    if not ranked:
        if untried and launches_left > 0 and (time_left_s is None or time_left_s > 0):
            return Plan([untried[0][0]])
        return Plan([], {"winner": None, "separated": False, "tie": False, "reason": "every finalist failed"})
    winner = ranked[0]
    mean, half = mean_ci(measured[winner])
    joining = [label for label, value in untried[:1]
               if sign * value >= sign * (mean - sign * half) or len(ranked) < 2]
    tied = [label for label in ranked[1:] if welch_p(measured[winner], measured[label]) >= ALPHA]
    if len(ranked) >= 2 and not tied and not joining:
        runner = ranked[1]
        return Plan([], {"winner": winner, "runner_up": runner, "separated": True, "tie": False,
                         "p": welch_p(measured[winner], measured[runner]), "tied_with": [],
                         "reason": f"Welch p < {ALPHA} against the runner-up"})
    if len(ranked) < 2 and not joining:
        return Plan([], {"winner": winner, "runner_up": None, "separated": True, "tie": False, "p": None,
                         "tied_with": [], "reason": "the only finalist that ran"})
    contenders = [winner, *tied]
    round_ = [*contenders, *joining]
    reason = None
    if any(tried[label] >= max_repeats for label in contenders):
        reason = f"{max_repeats} runs each (--max-repeats) did not separate them"
    elif len(round_) > launches_left:
        reason = "the launch budget ran out"
    elif time_left_s is not None and time_left_s <= 0:
        reason = "the time budget ran out"
    if reason is None:
        return Plan(round_)
    runner = tied[0] if tied else (ranked[1] if len(ranked) > 1 else None)
    return Plan([], {"winner": winner, "runner_up": runner, "separated": not tied, "tie": bool(tied),
                     "p": welch_p(measured[winner], measured[runner]) if runner else None,
                     "tied_with": tied, "reason": reason})
