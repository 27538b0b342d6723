"""The leaderboard as a rich table."""

from __future__ import annotations

import math

import optuna
from rich.table import Table

from sweeper.results.leaderboard import concurrency_levels, leaderboard_frame, parameter_names


def format_leaderboard_table(study: optuna.Study, top: int) -> Table:
    frame = leaderboard_frame(study)
    objective = (study.metric_names or ["objective"])[0]
    table = Table(title=f"{study.study_name}: top {top} of {len(frame)} trials ({objective})")
    params = parameter_names(study)
    levels = concurrency_levels(study)
    for column in ["#", "feasible", *params, objective, *[f"C={c} tok/s" for c in levels]]:
        table.add_column(column, overflow="fold")
    for _, row in frame.head(top).iterrows():
        feasible = "yes" if row["feasible"] else f"[red]{row['failure_kind'] or row['state'].lower()}[/]"
        if row["duplicate_of"] != "":
            feasible = f"dup of {row['duplicate_of']}"
        cells = [str(row["trial"]), feasible, *[_fmt(row[f"param_{p}"]) for p in params],
                 _fmt(row["objective"]), *[_fmt(row[f"c{c}_output_tok_s"]) for c in levels]]
        table.add_row(*cells)
    return table


def _fmt(value) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.2f}"
    return str(value)
