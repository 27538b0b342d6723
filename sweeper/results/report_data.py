"""Everything the report shows, gathered from the study alone (no GPU, no re-run) into plain
values. Pure: it reads the study object and returns data; the formatters turn it into text."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from sweeper.levels import Level, level_key
from sweeper.results.answer import Answer, build_answer
from sweeper.results.gap import GapToTarget, build_study_gap
from sweeper.results.importance import build_param_importances
from sweeper.results.leaderboard import format_capacity, parameter_names, study_levels
from sweeper.study.provenance import build_provenance
from sweeper.results.ranking import plain_cell, ranked_frame
from sweeper.study.stored import ObjectiveSpec, objective_spec, objective_specs

TOP_CONFIGS = 5
LATENCY_CONFIGS = 3
STAGES = ("preflight", "launch", "wait_ready", "check_output", "load", "stop")
PERCENTILES = ("median", "p90", "p99")


@dataclass(frozen=True)
class ConfigLevels:
    """One ranked config and its metrics at every level it measured validly."""

    trial: int
    rank: int
    value: float
    params: dict[str, Any]
    levels: tuple[int, ...]
    metrics: dict[int, dict[str, float]]  # level -> bench_serving metrics
    ci_low: float | None = None  # the ranked value's 95% CI (None: unknown)
    ci_high: float | None = None
    ci_source: str = "none"  # validation | precision | repeats | none (sweeper/study/confidence.py)
    tied_with_best: bool | None = None  # None: unknown (an interval is)
    precision_reached: bool | None = None
    capacity: str = ""  # a capacity study: the search's answer in words (leaderboard.format_capacity)

    @property
    def label(self) -> str:
        return f"#{self.trial}"

    def series(self, key: str) -> list[float]:
        return [float(self.metrics[c].get(key, float("nan"))) for c in self.levels]


@dataclass(frozen=True)
class TimelineRow:
    trial: int
    start_s: float
    stage_seconds: dict[str, float]
    outcome: str
    proposed_by: str = ""  # which strategy proposed the trial and why (search/local_search.py)


@dataclass(frozen=True)
class ReportData:
    title: str
    provenance: dict[str, str]
    objective: ObjectiveSpec
    levels: list[int]
    parameters: list[str]
    counts: dict[str, int]
    top: list[ConfigLevels]
    pareto_points: list[tuple[int, float, float]]  # (trial, latency, throughput)
    pareto_front: list[tuple[int, float, float]]
    importances: dict[str, float]
    importance_note: str
    failures: list[tuple[str, str, int, list[int]]]
    timeline: list[TimelineRow]
    stage_totals: dict[str, float]
    gap: GapToTarget | None
    ablation: Any = None
    space_description: str = ""
    # (trial, level, tok/s per user, tok/s per GPU) of every feasible trial's valid levels
    serving_points: list[tuple[int, int, float, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # the Pareto mode's two objectives (throughput, latency); empty for a one-objective study
    pareto_objectives: list[ObjectiveSpec] = field(default_factory=list)
    campaign: dict | None = None  # the campaign's morning summary (results/campaign_summary.py)
    validation: dict | None = None  # the finalists re-measured on fresh servers: rows with 95% CIs
    answer: Answer | None = None  # the study's winner, CI and tie, as `best` says them (results/answer.py)

    @property
    def pareto_axes(self) -> tuple[str, str]:
        """(latency axis, throughput axis) of the front: the study's two objectives, or p99 TTFT
        and output tok/s at the objective's level."""
        if self.pareto_objectives:
            throughput, latency = self.pareto_objectives
            return latency.name, throughput.name
        level = self.objective.level
        return f"p99_ttft_ms@c{level}", f"output_throughput@c{level}"


def pareto_front(points: list[tuple[int, float, float]]) -> list[tuple[int, float, float]]:
    """Points (trial, latency, throughput) that no other point beats on both: lower latency and
    higher throughput. Sorted by latency."""
    front: list[tuple[int, float, float]] = []
    best = float("-inf")
    for point in sorted(points, key=lambda p: (p[1], -p[2])):
        if point[2] > best:
            front.append(point)
            best = point[2]
    return front


def _valid_levels(trial: FrozenTrial, levels: list[Level]) -> dict[Level, dict]:
    stored = trial.user_attrs.get("levels", {})
    return {c: stored[level_key(c)] for c in levels if (stored.get(level_key(c)) or {}).get("valid") is True}


def build_top_configs(study: optuna.Study, frame, levels: list[int], k: int) -> list[ConfigLevels]:
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    top = []
    for _, row in frame[frame["rank"].notna()].head(k).iterrows():
        trial = trials[int(row["trial"])]
        metrics = _valid_levels(trial, levels)
        top.append(ConfigLevels(trial.number, int(row["rank"]), float(row["rank_value"]), dict(trial.params),
                                tuple(sorted(metrics)), metrics, plain_cell(row["ci_low"]), plain_cell(row["ci_high"]),
                                row["ci_source"] or "none", plain_cell(row["tied_with_best"]),
                                plain_cell(row["precision_reached"]),
                                format_capacity(row) if "capacity" in row.index else ""))
    return top


def build_pareto_points(study: optuna.Study, frame, level: int) -> list[tuple[int, float, float]]:
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    points = []
    for number in frame.loc[frame["rank"].notna(), "trial"]:
        metrics = _valid_levels(trials[int(number)], [level]).get(level)
        if metrics and metrics.get("p99_ttft_ms") is not None and metrics.get("output_throughput") is not None:
            points.append((int(number), float(metrics["p99_ttft_ms"]), float(metrics["output_throughput"])))
    return points


def build_serving_points(study: optuna.Study, frame, levels: list[int]) -> list[tuple[int, int, float, float]]:
    """The serving trade-off: each feasible trial at each of its valid levels, as (trial, level,
    tok/s per user, tok/s per GPU); levels missing either (GPUs unknown) are left out."""
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    points = []
    for number in frame.loc[frame["feasible"].astype(bool), "trial"]:
        for level, metrics in _valid_levels(trials[int(number)], levels).items():
            user, gpu = metrics.get("output_throughput_per_user"), metrics.get("output_throughput_per_gpu")
            if user is not None and gpu is not None:
                points.append((int(number), level, float(user), float(gpu)))
    return points


def build_objective_points(frame) -> tuple[list[tuple[int, float, float]], list[tuple[int, float, float]]]:
    """The Pareto mode: (trial, latency objective, throughput objective) of every feasible trial,
    and of those on the study's front (as the leaderboard computes it), by latency."""
    feasible = frame[frame["feasible"].astype(bool) & frame["objective"].notna()]
    points = [(int(r["trial"]), float(r["objective_2"]), float(r["objective"])) for _, r in feasible.iterrows()]
    front = sorted((p for p, on in zip(points, feasible["on_front"]) if on), key=lambda p: (p[1], -p[2]))
    return points, front


def build_failures(frame) -> list[tuple[str, str, int, list[int]]]:
    """(stage, kind, count, trials), most frequent first."""
    failed = frame[frame["failure_kind"].fillna("") != ""]
    groups: dict[tuple[str, str], list[int]] = {}
    for _, row in failed.iterrows():
        groups.setdefault((str(row["failure_stage"]), str(row["failure_kind"])), []).append(int(row["trial"]))
    return sorted(((s, k, len(t), sorted(t)) for (s, k), t in groups.items()), key=lambda g: (-g[2], g[0], g[1]))


def _outcome(trial: FrozenTrial, frame_row) -> str:
    if "duplicate_of" in trial.user_attrs:
        return f"duplicate of {trial.user_attrs['duplicate_of']}"
    if frame_row is not None and frame_row["failure_kind"]:
        return f"{frame_row['failure_stage']}/{frame_row['failure_kind']}"
    return trial.state.name.lower() if trial.state != TrialState.COMPLETE else "ok"


def build_timeline(study: optuna.Study, frame) -> list[TimelineRow]:
    trials = [t for t in study.get_trials(deepcopy=False) if t.datetime_start is not None]
    if not trials:
        return []
    origin = min(t.datetime_start for t in trials)
    rows_by_trial = {int(r["trial"]): r for _, r in frame.iterrows()}
    rows = []
    for t in sorted(trials, key=lambda t: t.number):
        seconds = t.user_attrs.get("stage_seconds") or {}
        ordered = {s: float(seconds[s]) for s in STAGES if s in seconds}
        ordered.update({s: float(v) for s, v in seconds.items() if s not in ordered})
        rows.append(TimelineRow(t.number, (t.datetime_start - origin).total_seconds(), ordered,
                                _outcome(t, rows_by_trial.get(t.number)), t.user_attrs.get("proposed_by", "")))
    return rows


def strategy_of(proposed_by: str) -> str:
    """A `proposed_by` label without its particulars, so trials of one strategy group:
    "gp: 1 lever from trial 12 (expected +3.1% ...)" -> "gp: 1 lever from trial N"; "seed x" -> "seed";
    `local`'s "tp_size=4, ep_size=2 from trial 7" -> "2 levers from trial N"."""
    head = proposed_by.split(" (")[0].strip()
    if head.startswith("seed "):
        return "seed"
    head = re.sub(r"\w+=[^\s,]+(?:, \w+=[^\s,]+)*",
                  lambda m: f"{m[0].count('=')} lever{'s' if m[0].count('=') > 1 else ''}", head)
    return re.sub(r"\btrial \d+", "trial N", head) or "-"


@dataclass(frozen=True)
class StrategyBudget:
    strategy: str
    trials: list[int]
    ran: int  # measured without a failure
    failed: int  # a failure of any kind, rules and SLOs included
    duplicates: int  # free: the measurement of an identical config was copied


def build_budget_by_strategy(timeline: list[TimelineRow]) -> list[StrategyBudget]:
    """How the search spent its trials: per strategy, in the order each first proposed one."""
    groups: dict[str, list[TimelineRow]] = {}
    for row in timeline:
        groups.setdefault(strategy_of(row.proposed_by), []).append(row)
    out = []
    for strategy, rows in groups.items():
        duplicates = sum(r.outcome.startswith("duplicate of") for r in rows)
        ran = sum(r.outcome == "ok" for r in rows)
        out.append(StrategyBudget(strategy, [r.trial for r in rows], ran, len(rows) - ran - duplicates, duplicates))
    return out


def build_stage_totals(timeline: list[TimelineRow]) -> dict[str, float]:
    totals: Counter[str] = Counter()
    for row in timeline:
        totals.update(row.stage_seconds)
    return {s: totals[s] for s in [*STAGES, *sorted(set(totals) - set(STAGES))] if s in totals}


def build_counts(study: optuna.Study, frame) -> dict[str, int]:
    trials = study.get_trials(deepcopy=False)
    return {
        "trials": len(trials),
        "evaluations": sum(1 for t in trials if t.state == TrialState.COMPLETE and t.user_attrs.get("launched")),
        "ranked": int(frame["rank"].notna().sum()) if len(frame) else 0,
        "failed": int((frame["failure_kind"].fillna("") != "").sum()) if len(frame) else 0,
        "duplicates": sum(1 for t in trials if "duplicate_of" in t.user_attrs),
    }


def build_report_data(study: optuna.Study, top: int = TOP_CONFIGS) -> ReportData:
    spec = objective_spec(study)
    levels = study_levels(study)
    frame = ranked_frame(study)
    importances, note = build_param_importances(study)
    timeline = build_timeline(study, frame) if len(frame) else []
    specs = objective_specs(study)
    if len(specs) > 1 and len(frame):
        points, front = build_objective_points(frame)
    else:
        points = build_pareto_points(study, frame, spec.level) if len(frame) else []
        front = pareto_front(points)
    return ReportData(
        title=f"sweeper report: {study.study_name}",
        provenance=build_provenance(study),
        objective=spec,
        levels=levels,
        parameters=parameter_names(study),
        counts=build_counts(study, frame),
        top=build_top_configs(study, frame, levels, top) if len(frame) else [],
        pareto_points=points,
        pareto_front=front,
        pareto_objectives=specs if len(specs) > 1 else [],
        importances=importances,
        importance_note=note,
        failures=build_failures(frame) if len(frame) else [],
        timeline=timeline,
        stage_totals=build_stage_totals(timeline),
        gap=build_study_gap(study),
        ablation=study.user_attrs.get("ablation"),
        space_description=str(study.user_attrs.get("space", {}).get("description", "")),
        serving_points=build_serving_points(study, frame, levels) if len(frame) else [],
        campaign=study.user_attrs.get("campaign_summary"),
        validation=study.user_attrs.get("validation"),
        answer=build_answer(study) if len(frame) else None,
    )
