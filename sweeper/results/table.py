"""The leaderboard as a rich table: rank, result, the ranking value, throughput per level, then
the config."""

from __future__ import annotations

import math

import optuna
import pandas as pd
from rich.table import Table

from sweeper.levels import metric_column, short_level
from sweeper.results.leaderboard import format_capacity, parameter_names, study_levels
from sweeper.study.trials import is_pareto_study
from sweeper.results.ranking import ranked_frame, resolve_level
from sweeper.study.stored import objective_spec, objective_specs


def format_leaderboard_table(study: optuna.Study, top: int, level: int | float | str | None = None,
                             feasible_only: bool = False) -> Table:
    level = resolve_level(study, level)
    frame = ranked_frame(study, level, feasible_only)
    if is_pareto_study(study):
        return _front_table(study, frame, top)
    spec = objective_spec(study, level)
    table = Table(title=f"{study.study_name}: top {min(top, len(frame))} of {len(frame)} trials "
                        f"(ranked by {spec.name})")
    levels = study_levels(study)
    table.add_column("#", justify="right")
    table.add_column("rank", justify="right")
    table.add_column("result")
    table.add_column(spec.name, justify="right")
    table.add_column("95% CI", justify="right")
    for c in levels:
        table.add_column(f"{short_level(c)}\ntok/s", justify="right")
    table.add_column("config", overflow="fold", ratio=1)
    params = parameter_names(study)
    validated = any(_flag(v) for v in frame["validated"])  # then a config measured once says so
    for _, row in frame.head(top).iterrows():
        config = " ".join(f"{p}={row[f'param_{p}']}" for p in params if row[f"param_{p}"] != "")
        value = format_capacity(row) if "capacity" in row.index else _fmt(row["rank_value"])
        result = format_result(row, short_level(spec.level), validated)
        table.add_row(str(row["trial"]), _fmt(row["rank"]), result, value,
                      format_ci_cell(row), *[_fmt(row[metric_column(c, "output_tok_s")]) for c in levels], config)
    return table


def format_ci_cell(row) -> str:
    """'low-high', '?' for a ranked value whose CI is unknown, '-' when the row does not rank."""
    if pd.isna(row["rank"]):
        return "-"
    if pd.isna(row["ci_low"]) or pd.isna(row["ci_high"]):
        return "[yellow]?[/]"
    return f"{row['ci_low']:.2f}-{row['ci_high']:.2f}"


def _front_table(study: optuna.Study, frame: pd.DataFrame, top: int) -> Table:
    """The Pareto mode: the front (ranked by the first objective) with both values, then the rest."""
    first, second = objective_specs(study)
    on_front = int(frame["on_front"].sum()) if len(frame) else 0
    table = Table(title=f"{study.study_name}: Pareto front of {first.name} (higher is better) and "
                        f"{second.name} (lower is better): {on_front} config{'s' if on_front != 1 else ''} on the front of "
                        f"{len(study.get_trials(deepcopy=False))} trials")
    for name in ("#", "rank", "result"):
        table.add_column(name, justify="right" if name != "result" else "left")
    table.add_column(first.name, justify="right")
    table.add_column(second.name, justify="right")
    table.add_column("config", overflow="fold", ratio=1)
    params = parameter_names(study)
    for _, row in frame.head(top).iterrows():
        config = " ".join(f"{p}={row[f'param_{p}']}" for p in params if row[f"param_{p}"] != "")
        table.add_row(str(row["trial"]), _fmt(row["rank"]), format_result(row), _fmt(row["objective"]),
                      _fmt(row["objective_2"]), config)
    return table


def format_result(row, level_name: str | None = None, validated: bool = False) -> str:
    """The row's verdict; `level_name` (levels.short_level) names the level it ranks at;
    `validated`: the study has validated configs, so a ranked row without re-runs is marked."""
    if row["duplicate_of"] != "":
        return f"dup of {row['duplicate_of']}"
    if "on_front" in row.index and row["feasible"]:
        return "[green]front[/]" if row["on_front"] else "dominated"
    if row["feasible"] and pd.isna(row["rank"]):
        return f"[yellow]invalid at {level_name or 'C=' + str(row['rank_level'])}[/]"
    if row["feasible"]:
        marks = ["[green]ok[/]"]
        if _flag(row.get("tied_with_best")) is True and row["rank"] != 1:
            marks.append("[cyan]tied with #1[/]")
        if _flag(row.get("precision_reached")) is False:
            marks.append("[yellow]imprecise[/]")
        if validated and _flag(row.get("validated")) is False:
            marks.append("[dim]unvalidated[/]")
        return ", ".join(marks)
    return f"[red]{row['failure_kind'] or row['state'].lower()}[/]"


def _flag(value) -> bool | None:
    """A boolean cell that may be missing (None, NA) as True, False or None."""
    return None if value is None or pd.isna(value) else bool(value)


def _fmt(value) -> str:
    if value is None or value is pd.NA:
        return "-"
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.2f}"
    return str(value)
