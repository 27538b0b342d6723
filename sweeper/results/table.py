"""The leaderboard as a rich table: result, throughput per level, then the config."""

from __future__ import annotations

import math

import optuna
from rich.table import Table

from sweeper.results.leaderboard import concurrency_levels, leaderboard_frame, parameter_names


def format_leaderboard_table(study: optuna.Study, top: int) -> Table:
    frame = leaderboard_frame(study)
    objective = (study.metric_names or ["objective"])[0]
    table = Table(title=f"{study.study_name}: top {min(top, len(frame))} of {len(frame)} trials "
                        f"(objective: {objective})")
    levels = concurrency_levels(study)
    table.add_column("#", justify="right")
    table.add_column("result")
    table.add_column("objective", justify="right")
    for level in levels:
        table.add_column(f"C={level}\ntok/s", justify="right")
    table.add_column("config", overflow="fold", ratio=1)
    params = parameter_names(study)
    for _, row in frame.head(top).iterrows():
        config = " ".join(f"{p}={row[f'param_{p}']}" for p in params if row[f"param_{p}"] != "")
        table.add_row(str(row["trial"]), format_result(row), _fmt(row["objective"]),
                      *[_fmt(row[f"c{c}_output_tok_s"]) for c in levels], config)
    return table


def format_result(row) -> str:
    if row["duplicate_of"] != "":
        return f"dup of {row['duplicate_of']}"
    if row["feasible"]:
        return "[green]ok[/]"
    return f"[red]{row['failure_kind'] or row['state'].lower()}[/]"


def _fmt(value) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.2f}"
    return str(value)
