"""Ablation and finalist summaries as rich tables."""

from __future__ import annotations

from rich.table import Table


def _num(value, fmt: str = "{:.2f}") -> str:
    return "-" if value is None else fmt.format(value)


def format_ablation_table(rows: list[dict], title: str) -> Table:
    table = Table(title=title)
    for column in ("lever", "mean", "delta", "95% CI", "delta %", "verdict"):
        table.add_column(column)
    colours = {"helps": "green", "hurts": "yellow", "breaks": "red"}
    for row in rows:
        verdict = row["verdict"]
        table.add_row(row["lever"], _num(row["mean"]), _num(row["delta"], "{:+.2f}"),
                      _num(row["ci95"], "±{:.2f}"), _num(row["delta_pct"], "{:+.1f}%"),
                      f"[{colours.get(verdict, 'white')}]{verdict}[/]")
    return table


def format_finalists_table(rows: list[dict], title: str) -> Table:
    table = Table(title=title)
    for column in ("rank", "config", "runs", "failed", "mean", "95% CI"):
        table.add_column(column, overflow="fold")
    for rank, row in enumerate(rows, start=1):
        table.add_row(str(rank), row["config"], str(row["runs"]), str(row["failed"]),
                      _num(row["mean"]), _num(row["ci95"], "±{:.2f}"))
    return table


def format_pareto_finalists_table(rows: list[dict], names: tuple[str, str], title: str) -> Table:
    """The Pareto mode's finalists: both objectives with their 95% CIs, front membership by means."""
    table = Table(title=title)
    for column in ("config", "runs", "failed", f"{names[0]} mean", "95% CI", f"{names[1]} mean", "95% CI",
                   "front"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row["config"], str(row["runs"]), str(row["failed"]), _num(row["mean"]),
                      _num(row["ci95"], "±{:.2f}"), _num(row["mean_2"]), _num(row["ci95_2"], "±{:.2f}"),
                      "[green]yes[/]" if row["on_front"] else ("failed" if row["mean"] is None else "dominated"))
    return table
