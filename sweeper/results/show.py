"""`sweeper show`: trials by state, the best so far, what is running."""

from __future__ import annotations

from collections import Counter

import optuna
from optuna.trial import TrialState
from rich.console import Group
from rich.table import Table
from rich.text import Text

from sweeper.results.answer import build_answer, format_answer_lines
from sweeper.results.gap import build_study_gap, format_gap_lines
from sweeper.study.trials import best_trial, is_evaluation
from sweeper.results.leaderboard import format_values
from sweeper.results.ranking import plain_cell, ranked_frame, trial_by_number
from sweeper.study.trials import infeasible_reason, is_pareto_study, pareto_trials
from sweeper.study.stored import output_rejected, reference_text


def build_show_record(study: optuna.Study) -> dict:
    """What `show` says, as plain data (`show --json`): counts by state, why trials do not rank,
    the best (or the Pareto front), engine warnings, the gap to target, and what is running."""
    trials = study.get_trials(deepcopy=False)
    reference, rejected = reference_text(study), output_rejected(study)
    infeasible = Counter(infeasible_reason(t, reference, rejected) for t in trials
                         if t.state == TrialState.COMPLETE)
    infeasible.pop(None, None)
    if is_pareto_study(study):
        confidence = ranked_confidence(study)
        front = pareto_trials(study) if best_trial(study) else []
        best = [{"trial": t.number, "values": list(t.values), "params": t.params,
                 **_confidence_of(confidence, t.number)} for t in front]
    else:  # the answer (results/answer.py): a validated finalist ranks by its re-runs' mean
        answer = build_answer(study)
        best = [] if answer is None else [{
            "values": list(trial_by_number(study, answer.trial).values), **answer.as_record(),
            "lines": format_answer_lines(answer)}]
    return {
        "study": study.study_name,
        "trials": len(trials),
        "evaluations": sum(1 for t in trials if is_evaluation(t)),
        "budget": study.user_attrs.get("budget"),
        "by_state": dict(sorted(Counter(t.state.name for t in trials).items())),
        "not_ranked": dict(sorted(infeasible.items())),
        "pareto": is_pareto_study(study),
        "best": best,
        "engine_warnings": list(study.user_attrs.get("engine_warnings") or []),
        "gap": build_study_gap(study),
        "running": [{"trial": t.number, "stage": t.user_attrs.get("stage", "?"), "host": t.user_attrs.get("host", "?"),
                     "pid": (t.user_attrs.get("process") or {}).get("pid"), "params": t.params}
                    for t in trials if t.state == TrialState.RUNNING],
    }


def format_show(study: optuna.Study) -> Group:
    record = build_show_record(study)
    lines = [Text(f"study {record['study']}: {record['trials']} trials, {record['evaluations']} of "
                  f"{record['budget'] if record['budget'] is not None else '?'} evaluations spent")]
    lines.append(Text("by state: " + ", ".join(f"{k} {v}" for k, v in record["by_state"].items())))
    if record["not_ranked"]:
        lines.append(Text("not ranked: " + ", ".join(f"{k} {v}" for k, v in record["not_ranked"].items())))
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    ranked = [by_number[b["trial"]] for b in record["best"]]
    if ranked and record["pareto"]:
        lines.append(Text(f"Pareto front: {len(ranked)} configs (trials {', '.join(str(t.number) for t in ranked)})"))
        lines += [Text(f"  trial {t.number}: {format_values(study, t)}, {t.params}") for t in ranked]
    elif ranked:
        first = record["best"][0]
        winner, tie, *noise = first["lines"]
        lines.append(Text(f"best: {winner}, {ranked[0].params}"))
        lines.append(Text(tie, style="yellow" if first["tied_with"] else ""))
        lines += [Text(line) for line in noise]
    else:
        lines.append(Text("best: none feasible yet"))
    lines += [Text(f"engine: {warning}", style="yellow") for warning in record["engine_warnings"]]
    if record["gap"]:
        lines += [Text(line) for line in format_gap_lines(record["gap"])]
    if record["running"]:
        table = Table(title="running")
        for column in ("#", "stage", "host", "pid", "params"):
            table.add_column(column)
        for run in record["running"]:
            table.add_row(str(run["trial"]), run["stage"], run["host"], str(run["pid"] or "-"), str(run["params"]))
        lines.append(table)
    return Group(*lines)


def ranked_confidence(study: optuna.Study) -> list[dict]:
    """The ranked trials at the objective's level, #1 first: value, 95% CI (None when unknown),
    where the CI came from, and the tie with #1 (ranking.py, sweeper/study/confidence.py)."""
    frame = ranked_frame(study, feasible_only=True)
    return [{"trial": int(row["trial"]), "value": float(row["rank_value"]), "ci_low": plain_cell(row["ci_low"]),
             "ci_high": plain_cell(row["ci_high"]), "ci_source": row["ci_source"] or "none",
             "precision_reached": plain_cell(row["precision_reached"]), "tied_with_best": plain_cell(row["tied_with_best"]),
             "tie_rule": row["tie_rule"] or None} for _, row in frame.iterrows()]


def _confidence_of(confidence: list[dict], number: int) -> dict:
    """A Pareto front member's CI of the first objective (the front trades: no ties)."""
    row = next((r for r in confidence if r["trial"] == number), None) or {}
    return {"value": row.get("value"), "ci_low": row.get("ci_low"), "ci_high": row.get("ci_high"),
            "ci_source": row.get("ci_source", "none"), "tied_with": [], "tie_rule": None}


def build_best_record(study: optuna.Study) -> dict | None:
    """`best --json`: the study's answer (results/answer.py): rank 1 with its 95% CI, whether it
    was validated, on how many fresh launches, and the trials tied with it (None: no statement
    possible). In the Pareto mode the front's best throughput, no tie (the front trades). None when
    nothing is feasible."""
    best = best_trial(study)
    if best is None:
        return None
    if is_pareto_study(study):
        return {"trial": best.number, "params": best.params, "value": best.values[0], "ci_low": None,
                "ci_high": None, "validated": False, "tied_with": []}
    answer = build_answer(study)
    return None if answer is None else answer.as_record()
