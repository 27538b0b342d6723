"""The campaign's morning summary: winner with its 95% CI, the runner-up, tie or not, launches
spent, failures by kind, GPU hours, the gap to target and what each phase cost. Built from the
campaign study and its validation study (pure reads); kept in the study (`campaign_summary`) so the
report heads with it."""

from __future__ import annotations

from collections import Counter

import optuna

from sweeper.levels import short_level
from sweeper.results.answer import NOISE_FLOOR_ATTR, build_answer, format_noise_floor
from sweeper.results.gap import build_study_gap
from sweeper.study.trials import is_evaluation
from sweeper.spec.hosts import HostSpec


def _row(rows: list[dict], label: str | None) -> dict | None:
    return next((r for r in rows if r["config"] == label), None) if label else None


def _launched_seconds(study: optuna.Study) -> float:
    return sum((t.datetime_complete - t.datetime_start).total_seconds() for t in study.get_trials(deepcopy=False)
               if is_evaluation(t) and t.datetime_start and t.datetime_complete)


def gpus_per_launch(attrs: dict) -> int:
    """GPUs one server holds: a GPU set's size when the host has sets, else the host's GPUs."""
    spec = attrs.get("host_spec") or {}
    sets = spec.get("gpu_sets") or []
    return len(sets[0].split(",")) if sets else int(spec.get("gpus", HostSpec.model_fields["gpus"].default))


def failures_by_kind(*studies: optuna.Study) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for study in studies:
        for t in study.get_trials(deepcopy=False):
            if failure := t.user_attrs.get("failure"):
                counts[f"{failure['stage']}/{failure['kind']}"] += 1
            elif "skipped_broken" in t.user_attrs:
                counts["skipped (known broken, warm start)"] += 1
            elif t.user_attrs.get("infra_error") or t.user_attrs.get("interrupted"):
                counts["infrastructure (re-run)"] += 1
    return dict(counts.most_common())


def _winner(study: optuna.Study) -> tuple[dict | None, list[int]]:
    """The validated winner and the trials tied with it, as the study's answer names them
    (results/answer.py: the campaign's verdict)."""
    answer = build_answer(study)
    if answer is None or not answer.validated:
        return None, []
    known = answer.ci_low is not None and answer.ci_high is not None
    return {"trial": answer.trial, "params": answer.params, "mean": answer.value,
            "ci95": (answer.ci_high - answer.ci_low) / 2 if known else None,
            "runs": answer.launches + answer.failed_launches, "failed": answer.failed_launches}, answer.tied_with or []


def build_campaign_summary(study: optuna.Study, validation: optuna.Study) -> dict:
    record = study.user_attrs.get("campaign") or {}
    phases = record.get("phases", {})
    verdict = phases.get("validate", {}).get("verdict") or {}
    rows = (study.user_attrs.get("validation") or {}).get("rows", [])
    runner = _row(rows, verdict.get("runner_up"))
    winner, tied = _winner(study)
    params = {t.number: dict(t.params) for t in study.get_trials(deepcopy=False)}
    sweep_launches = sum(1 for t in study.get_trials(deepcopy=False) if is_evaluation(t))
    validation_launches = sum(1 for t in validation.get_trials(deepcopy=False) if is_evaluation(t))
    profiled = 1 if phases.get("profile", {}).get("dir") else 0
    gpus = gpus_per_launch(study.user_attrs)
    server_s = _launched_seconds(study) + _launched_seconds(validation)
    gap = build_study_gap(study)

    def config(row):
        if row is None:
            return None
        number = int(row["config"].split()[-1])
        return {"trial": number, "params": params.get(number, {}), "mean": row["mean"], "ci95": row["ci95"],
                "runs": row["runs"], "failed": row["failed"]}

    return {
        "winner": winner, "runner_up": config(runner),
        "separated": bool(verdict.get("separated")) and not tied, "tie": bool(tied),
        "tied_with": tied, "p": verdict.get("p"), "why": verdict.get("reason"),
        "noise_floor": study.user_attrs.get(NOISE_FLOOR_ATTR),
        "launches": {"sweep": sweep_launches, "validation": validation_launches, "profile": profiled,
                     "total": sweep_launches + validation_launches + profiled},
        "failures": failures_by_kind(study, validation),
        "server_hours": server_s / 3600, "gpus_per_launch": gpus, "gpu_hours": server_s * gpus / 3600,
        "gap": None if gap is None else {
            "target": f"{gap.metric} = {gap.target_value:g} at {short_level(gap.level)}", "shortfall": gap.shortfall,
            "step_ms": gap.step_ms, "needed_step_ms": gap.needed_step_ms,
            "kernels": {k.group: k.fraction for k in gap.kernels}},
        "phases": {name: {"seconds": p.get("seconds"), **({"launches": p["launches"]} if "launches" in p else {}),
                          **({"evaluations": p["evaluations"]} if "evaluations" in p else {}),
                          **({k: p[k] for k in ("skipped", "failed") if k in p})}
                   for name, p in phases.items()},
        "metric": study.user_attrs.get("space", {}).get("objective", {}).get("metric", "objective"),
    }


def format_summary_lines(summary: dict) -> list[str]:
    """The summary in plain lines, for the terminal and the report's first section."""
    w, r = summary["winner"], summary["runner_up"]
    lines = []
    if w is None:
        lines.append("winner: none (every finalist failed on re-run)")
    else:
        ci = "95% CI unknown" if w["ci95"] is None else f"± {w['ci95']:.2f} (95% CI"
        lines.append(f"winner: trial {w['trial']}, {summary['metric']} {w['mean']:.2f} {ci}, "
                     f"{w['runs'] - w['failed']} fresh runs): " + " ".join(f"{k}={v}" for k, v in w["params"].items()))
    if r is not None:
        p = f", Welch p = {summary['p']:.3g}" if summary["p"] is not None else ""
        half = "(one run)" if r["ci95"] is None or r["ci95"] == float("inf") else f"± {r['ci95']:.2f}"
        lines.append(f"runner-up: trial {r['trial']}, {r['mean']:.2f} {half}{p}")
    if summary["tie"]:
        tied = summary["tied_with"]
        lines.append(f"TIE: trial {w['trial']} cannot be told apart from trial{'s' if len(tied) > 1 else ''} "
                     f"{', '.join(map(str, tied))} ({summary['why']}); pick among them on other grounds")
    elif w is not None:
        lines.append(f"separated: yes ({summary['why']})")
    if noise := format_noise_floor(summary.get("noise_floor")):
        lines.append(noise)
    launches = summary["launches"]
    lines.append(f"launches: {launches['total']} ({launches['sweep']} sweep, {launches['validation']} validation, "
                 f"{launches['profile']} profile)")
    failures = summary["failures"]
    lines.append("failures: " + (", ".join(f"{k} {n}" for k, n in failures.items()) if failures else "none"))
    lines.append(f"GPU hours: {summary['gpu_hours']:.2f} ({summary['server_hours']:.2f} server hours x "
                 f"{summary['gpus_per_launch']} GPUs per launch)")
    if gap := summary["gap"]:
        short = f"{gap['shortfall']:.2f}x short" if gap["shortfall"] and gap["shortfall"] > 1 else "reached"
        kernels = ", ".join(f"{g} {100 * f:.0f}%" for g, f in sorted(gap["kernels"].items(), key=lambda i: -i[1]))
        lines.append(f"gap to target ({gap['target']}): {short}"
                     + (f"; the step by kernel group: {kernels}" if kernels else ""))
    lines.append("phases: " + ", ".join(
        f"{name} {p['seconds']:.0f}s" + (f" ({p['skipped']})" if p.get("skipped") else "")
        for name, p in summary["phases"].items() if p.get("seconds") is not None))
    return lines
