"""The report as neutral sections (headings, paragraphs, tables, a figure name), built from
ReportData. The HTML and Markdown renderers both read these, so the two files say the same."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from sweeper.levels import is_rate, short_level
from sweeper.outcomes import CAPACITY_METRIC
from sweeper.results.answer import format_noise_floor
from sweeper.results.gap import GapToTarget, format_gap_lines
from sweeper.results.report_data import PERCENTILES, ReportData, build_budget_by_strategy
from sweeper.results.campaign_summary import format_summary_lines


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Section:
    key: str  # anchor id, and the figure's file name when there is one
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figure: str | None = None  # name of the figure shown in this section


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:,.{digits}f}"
    return str(value)


def format_params(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


def format_ci(config) -> str:
    """'low-high (source)', flagged when the level's precision was not reached; 'unknown' when
    no interval was recorded (a single measurement is never shown as precise)."""
    if config.ci_low is None or config.ci_high is None:
        return "unknown"
    imprecise = ", imprecise" if config.precision_reached is False else ""
    return f"{fmt(config.ci_low)}-{fmt(config.ci_high)} ({config.ci_source}{imprecise})"


def format_tie(config) -> str:
    if config.rank == 1:
        return "#1"
    return {True: "tied", False: "no", None: "unknown"}[config.tied_with_best]


def tie_sentence(data: ReportData) -> str:
    """Whether the top is a tie, in words: the study's answer (results/answer.py), as `best` says it."""
    if data.pareto_objectives or data.answer is None:
        return "The front's members trade throughput for latency; 95% CIs of the first objective."
    answer = data.answer
    tied = answer.tied_with
    if tied is None:
        return "The best value's 95% CI is unknown (a single measurement): ties cannot be told."
    if tied:
        how = f": the campaign could not separate them ({answer.why})" if answer.why else " at 5%"
        return (f"The top is a tie: trial{'s' if len(tied) > 1 else ''} {', '.join(map(str, tied))} "
                f"cannot be told apart from #1 (trial {answer.trial}){how}.")
    shown = "validated config" if answer.validated else "config shown"
    return f"No {shown} is statistically tied with #1 (trial {answer.trial}) at 5%."


def build_summary_section(data: ReportData) -> Section:
    c, p = data.counts, data.provenance
    if data.pareto_objectives:
        throughput, latency = data.pareto_objectives
        goal = (f"Two objectives (the Pareto mode): maximize {throughput.metric} at {short_level(throughput.level)}, "
                f"minimize {latency.metric} at {short_level(latency.level)}; the ranked configs are the Pareto front.")
    elif data.objective.metric == CAPACITY_METRIC:
        load = "request rate" if is_rate(data.objective.level) else "concurrency"
        goal = (f"Objective: max_load_within_slo, the highest {load} within the SLO, searched per trial "
                "(maximize).")
    else:
        goal = (f"Objective: {data.objective.metric} at {short_level(data.objective.level)} "
                f"({'maximize' if data.objective.maximize else 'minimize'}).")
    text = (f"{c['trials']} trials, {c['evaluations']} real evaluations, {c['ranked']} ranked, "
            f"{c['failed']} failed, {c['duplicates']} duplicates. {goal} "
            f"Engine {p['engine'] or '?'} on host {p['host'] or '?'}, model {p['model'] or '?'}.")
    paragraphs = [data.space_description, text] if data.space_description else [text]
    return Section("summary", "Summary", paragraphs)


def build_campaign_section(summary: dict | None) -> Section | None:
    """The morning summary, first in the report of a campaign."""
    if not summary:
        return None

    phases = Table(["phase", "wall seconds", "launches"],
                   [[name, fmt(p.get("seconds"), 0), fmt(p.get("launches", p.get("evaluations")))]
                    for name, p in summary["phases"].items()])
    return Section("campaign", "Campaign summary", format_summary_lines(summary), [phases])


def build_validation_section(validation: dict | None) -> Section | None:
    """The finalists re-measured on fresh servers in interleaved order: mean and 95% CI each."""
    if not validation or validation.get("mode") == "pareto" or not validation.get("rows"):
        return None
    rows = [[r["config"], str(r["runs"]), str(r["failed"]), fmt(r["mean"]),
             "-" if r["ci95"] is None else f"± {fmt(r['ci95'])}"] for r in validation["rows"]]
    note = (f"Validation study {validation.get('study', '?')}: each finalist on fresh servers, rounds in "
            "interleaved order; the interval is the 95% CI of the mean (Student t).")
    return Section("validation", "Finalists re-measured", [note],
                   [Table(["config", "runs", "failed", "mean", "95% CI"], rows)])


def build_gap_section(gap: GapToTarget | None) -> Section | None:
    if gap is None:
        return None
    steps = Table(["level", "step (median ITL, ms)", "output tok/s"],
                  [[str(s.level), fmt(s.step_ms, 1), fmt(s.output_tok_s)] for s in gap.steps])
    tables = [steps]
    if gap.kernels:
        tables.append(Table(["kernel group", f"share of the step at {short_level(gap.level)}", "ms"],
                            [[k.group, f"{100 * k.fraction:.1f}%", fmt(k.step_ms, 1)] for k in gap.kernels]))
    notes = ["The decode step at each level is the median inter-token latency (in a decode-bound "
             "regime each running request gets one token per step); C requests at T tok/s in all "
             "need a step of C / T seconds."]
    return Section("gap", "Gap to target", format_gap_lines(gap) + notes, tables)


def build_top_section(data: ReportData) -> Section:
    levels = data.levels
    rows = [[str(c.rank), str(c.trial), c.capacity or fmt(c.value), format_ci(c), format_tie(c),
             *[fmt(c.metrics[l]["output_throughput"]) if l in c.metrics else "-" for l in levels],
             format_params(c.params)] for c in data.top]
    table = Table(["rank", "trial", data.objective.name, "95% CI", "tied with #1",
                   *[f"{short_level(l)} tok/s" for l in levels], "config"], rows)
    paragraphs = [tie_sentence(data)] if data.top else ["No config has ranked yet."]
    if data.top and (noise := format_noise_floor(data.answer.noise_floor if data.answer else None)):
        paragraphs.append(f"{noise[0].upper()}{noise[1:]}.")
    return Section("throughput", "Throughput against concurrency (top configs)", paragraphs, [table],
                   figure="throughput")


def build_latency_section(data: ReportData) -> Section:
    tables = []
    for config in data.top[:1]:
        headers = ["level", *[f"TTFT {p} (ms)" for p in PERCENTILES], *[f"ITL {p} (ms)" for p in PERCENTILES]]
        rows = [[str(level), *[fmt(config.metrics[level].get(f"{p}_ttft_ms"), 1) for p in PERCENTILES],
                 *[fmt(config.metrics[level].get(f"{p}_itl_ms"), 1) for p in PERCENTILES]]
                for level in config.levels]
        tables.append(Table(headers, rows))
    paragraphs = [f"Percentiles per level of the best config (trial {data.top[0].trial}); the plot shows "
                  f"the top {min(3, len(data.top))}."] if data.top else ["No config has ranked yet."]
    return Section("latency", "TTFT and ITL percentiles per level", paragraphs, tables, figure="latency")


def build_pareto_section(data: ReportData) -> Section:
    latency, throughput = data.pareto_axes
    table = Table(["trial", f"{latency} (lower is better)", f"{throughput} (higher is better)"],
                  [[str(t), fmt(lat, 1), fmt(tok)] for t, lat, tok in data.pareto_front])
    which = "feasible configs (the study's two objectives)" if data.pareto_objectives else "ranked configs"
    text = (f"{len(data.pareto_front)} of {len(data.pareto_points)} {which} are on the front: no other "
            f"is at least as good on both ({latency} as low, {throughput} as high) and better on one.")
    return Section("pareto", f"Pareto front: {throughput} against {latency}", [text], [table],
                   figure="pareto")


def build_serving_section(data: ReportData) -> Section:
    trials = len({p[0] for p in data.serving_points})
    text = (f"{len(data.serving_points)} levels of {trials} feasible configs. Each line is one config from low to "
            "high concurrency: batching buys tok/s per GPU with each user's speed (1 / TPOT). Up and to the right "
            "is better; GPUs per config come from the space's `gpus:` or the engine's TP x DP x PP."
            if data.serving_points else "No level records both tok/s per user and per GPU (the GPU count of a "
            "config is unknown: set `gpus:` in the space).")
    return Section("serving", "Serving trade-off: tok/s per user against tok/s per GPU", [text], [], figure="serving")


def build_importance_section(data: ReportData) -> Section:
    table = Table(["parameter", "importance"], [[k, f"{v:.3f}"] for k, v in data.importances.items()])
    return Section("importance", "Parameter importance",
                   [f"optuna.importance.get_param_importances {data.importance_note}."],
                   [table] if data.importances else [], figure="importance")


def build_failures_section(data: ReportData) -> Section:
    table = Table(["stage", "kind", "trials", "which"],
                  [[s, k, str(n), ", ".join(map(str, t))] for s, k, n, t in data.failures])
    text = f"{sum(n for _, _, n, _ in data.failures)} failed trials." if data.failures else "No failures."
    return Section("failures", "Failures by stage and kind", [text], [table] if data.failures else [],
                   figure="failures")


def build_timeline_section(data: ReportData) -> Section:
    total = sum(data.stage_totals.values())
    totals = Table(["stage", "wall seconds", "share"],
                   [[s, fmt(v, 1), f"{100 * v / total:.1f}%" if total else "-"] for s, v in data.stage_totals.items()])
    per_trial = Table(["trial", "start (s)", *data.stage_totals, "outcome", "proposed by"],
                      [[str(r.trial), fmt(r.start_s, 1), *[fmt(r.stage_seconds.get(s), 2) for s in data.stage_totals],
                        r.outcome, r.proposed_by or "-"] for r in data.timeline])
    text = [f"{fmt(total, 1)} wall seconds in trial stages over {len(data.timeline)} trials. The first table: "
            f"how the search spent them, by each trial's `proposed_by` without its particulars."]
    budget = build_budget_by_strategy(data.timeline)
    by_strategy = Table(["proposed by", "trials", "ran", "failed", "duplicates (free)", "which"],
                        [[b.strategy, str(len(b.trials)), str(b.ran), str(b.failed), str(b.duplicates),
                          ", ".join(map(str, b.trials))] for b in budget])
    proposer = {r.trial: r.proposed_by for r in data.timeline}
    if data.top and proposer.get(data.top[0].trial):
        text.append(f"The best, trial {data.top[0].trial}, was proposed by: {proposer[data.top[0].trial]}.")
    return Section("timeline", "Timeline of the sweep: where the time went", text, [by_strategy, totals, per_trial],
                   figure="timeline")


def build_ablation_section(ablation: Any) -> Section | None:
    """The study attr `ablation`, when a study has one: a list of rows, a mapping of rows, or any
    other JSON value shown as is."""
    if ablation in (None, {}, []):
        return None
    rows = None
    if isinstance(ablation, list) and all(isinstance(r, dict) for r in ablation):
        rows = ablation
    elif isinstance(ablation, dict) and all(isinstance(r, dict) for r in ablation.values()):
        rows = [{"name": name, **r} for name, r in ablation.items()]
    if rows:
        headers = list(dict.fromkeys(k for r in rows for k in r))
        return Section("ablation", "Ablation", [], [Table(headers, [[fmt(r.get(h)) for h in headers] for r in rows])])
    return Section("ablation", "Ablation", [json.dumps(ablation, indent=1, default=str)])


def build_provenance_section(data: ReportData) -> Section:
    rows = [[k, v if v else "(unknown)"] for k, v in data.provenance.items()]
    return Section("provenance", "Provenance", ["Rebuilt from the study storage alone (no GPU, no re-run). "
                                                "(unknown): the study does not record it."],
                   [Table(["what", "value"], rows)])


def build_sections(data: ReportData) -> list[Section]:
    sections = [
        build_campaign_section(data.campaign), build_summary_section(data), build_validation_section(data.validation),
        build_gap_section(data.gap), build_top_section(data),
        build_latency_section(data), build_pareto_section(data), build_serving_section(data),
        build_importance_section(data),
        build_failures_section(data), build_timeline_section(data), build_ablation_section(data.ablation),
        build_provenance_section(data),
    ]
    return [s for s in sections if s is not None]
