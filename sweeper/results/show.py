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


def format_show(study: optuna.Study) -> Group:
    trials = study.get_trials(deepcopy=False)
    reference = reference_text(study)
    states = Counter(t.state.name for t in trials)
    rejected = output_rejected(study)
    infeasible = Counter(infeasible_reason(t, reference, rejected) for t in trials
                         if t.state == TrialState.COMPLETE)
    infeasible.pop(None, None)
    evaluated = sum(1 for t in trials if is_evaluation(t))
    lines = [Text(f"study {study.study_name}: {len(trials)} trials, {evaluated} of "
                  f"{study.user_attrs.get('budget', '?')} evaluations spent")]
    lines.append(Text("by state: " + ", ".join(f"{k} {v}" for k, v in sorted(states.items()))))
    if infeasible:
        lines.append(Text("not ranked: " + ", ".join(f"{k} {v}" for k, v in sorted(infeasible.items()))))
    best = best_trial(study)
    if best and is_pareto_study(study):
        front = pareto_trials(study)
        lines.append(Text(f"Pareto front: {len(front)} configs (trials {', '.join(str(t.number) for t in front)})"))
        lines += [Text(f"  trial {t.number}: {format_values(study, t)}, {t.params}") for t in front]
    elif best:
        lines.append(Text(f"best: trial {best.number}, {format_values(study, best)}, {best.params}"))
    else:
        lines.append(Text("best: none feasible yet"))
    for warning in study.user_attrs.get("engine_warnings") or []:
        lines.append(Text(f"engine: {warning}", style="yellow"))
    if gap := build_study_gap(study):
        lines += [Text(line) for line in format_gap_lines(gap)]
    running = [t for t in trials if t.state == TrialState.RUNNING]
    if running:
        table = Table(title="running")
        for column in ("#", "stage", "host", "pid", "params"):
            table.add_column(column)
        for t in running:
            proc = t.user_attrs.get("process") or {}
            table.add_row(str(t.number), t.user_attrs.get("stage", "?"), t.user_attrs.get("host", "?"),
                          str(proc.get("pid", "-")), str(t.params))
        lines.append(table)
    return Group(*lines)
