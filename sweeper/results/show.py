"""`sweeper show`: trials by state, the best so far, what is running."""

from __future__ import annotations

from collections import Counter

import optuna
from optuna.trial import TrialState
from rich.console import Group
from rich.table import Table
from rich.text import Text

from sweeper.results.gap import build_study_gap, format_gap_lines
from sweeper.search.trials import best_trial, is_evaluation
from sweeper.results.leaderboard import format_values
from sweeper.search.trials import infeasible_reason, is_pareto_study, pareto_trials
from sweeper.search.stored import output_rejected, reference_text


RECENT = 5  # finished trials shown with the strategy that proposed them


def build_show_record(study: optuna.Study) -> dict:
    """What `show` says, as plain data (`show --json`): counts by state, why trials do not rank,
    the best (or the Pareto front), engine warnings, the gap to target, and what is running."""
    trials = study.get_trials(deepcopy=False)
    reference, rejected = reference_text(study), output_rejected(study)
    infeasible = Counter(infeasible_reason(t, reference, rejected) for t in trials
                         if t.state == TrialState.COMPLETE)
    infeasible.pop(None, None)
    best = best_trial(study)
    ranked = (pareto_trials(study) if is_pareto_study(study) else [best]) if best else []
    return {
        "study": study.study_name,
        "trials": len(trials),
        "evaluations": sum(1 for t in trials if is_evaluation(t)),
        "budget": study.user_attrs.get("budget"),
        "by_state": dict(sorted(Counter(t.state.name for t in trials).items())),
        "not_ranked": dict(sorted(infeasible.items())),
        "pareto": is_pareto_study(study),
        "best": [{"trial": t.number, "values": list(t.values), "params": t.params} for t in ranked],
        "engine_warnings": list(study.user_attrs.get("engine_warnings") or []),
        "gap": build_study_gap(study),
        "running": [{"trial": t.number, "stage": t.user_attrs.get("stage", "?"), "host": t.user_attrs.get("host", "?"),
                     "pid": (t.user_attrs.get("process") or {}).get("pid"),
                     "proposed_by": t.user_attrs.get("proposed_by"), "params": t.params}
                    for t in trials if t.state == TrialState.RUNNING],
        "recent": [{"trial": t.number, "state": t.state.name, "values": list(t.values or []),
                    "proposed_by": t.user_attrs.get("proposed_by")}
                   for t in [t for t in trials if t.state.is_finished()][-RECENT:]],
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
        lines.append(Text(f"best: trial {ranked[0].number}, {format_values(study, ranked[0])}, {ranked[0].params}"))
    else:
        lines.append(Text("best: none feasible yet"))
    lines += [Text(f"engine: {warning}", style="yellow") for warning in record["engine_warnings"]]
    if record["gap"]:
        lines += [Text(line) for line in format_gap_lines(record["gap"])]
    if record["running"]:
        table = Table(title="running")
        for column in ("#", "stage", "host", "pid", "proposed by", "params"):
            table.add_column(column)
        for run in record["running"]:
            table.add_row(str(run["trial"]), run["stage"], run["host"], str(run["pid"] or "-"),
                          run["proposed_by"] or "-", str(run["params"]))
        lines.append(table)
    if record["recent"]:
        table = Table(title=f"last {len(record['recent'])} finished")
        for column in ("#", "state", "value", "proposed by"):
            table.add_column(column)
        for done in record["recent"]:
            value = ", ".join(f"{v:.4g}" for v in done["values"]) or "-"
            table.add_row(str(done["trial"]), done["state"], value, done["proposed_by"] or "-")
        lines.append(table)
    return Group(*lines)


def build_best_record(study: optuna.Study) -> dict | None:
    """`best --json`: the winner with its 95% CI once `validate` re-ran the finalists (their means
    rank; configs whose intervals overlap the winner's are `tied_with` it), else the best single
    measurement with no CI. None when nothing is feasible."""
    best = best_trial(study)
    if best is None:
        return None
    rows = [r for r in (study.user_attrs.get("validation") or {}).get("rows", []) if r.get("mean") is not None]
    if not rows or (study.user_attrs.get("validation") or {}).get("mode") == "pareto":
        return {"trial": best.number, "params": best.params, "value": best.values[0], "ci_low": None,
                "ci_high": None, "validated": False, "tied_with": []}
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    interval = {int(r["config"].split()[-1]): (r["mean"] - (r["ci95"] or 0), r["mean"] + (r["ci95"] or 0)) for r in rows}
    winner = int(rows[0]["config"].split()[-1])
    low, high = interval[winner]
    return {"trial": winner, "params": by_number[winner].params, "value": rows[0]["mean"], "ci_low": low,
            "ci_high": high, "validated": True,
            "tied_with": [n for n, (lo, hi) in interval.items() if n != winner and lo <= high and hi >= low]}
