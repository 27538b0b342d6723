"""The report's plots: pure builders, data in, a matplotlib Figure (Agg canvas) out, and the one
conversion to PNG bytes. Every figure has the same size in pixels."""

from __future__ import annotations

import io
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")  # no display: the report is built on servers and in CI

from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from sweeper.levels import is_rate, short_level  # noqa: E402

FIG_INCHES = (9.0, 4.8)
DPI = 100
FIG_PIXELS = (int(FIG_INCHES[0] * DPI), int(FIG_INCHES[1] * DPI))  # (width, height)
STAGE_COLORS = {"preflight": "#9e9e9e", "launch": "#8d6e63", "wait_ready": "#ef6c00",
                "check_output": "#7e57c2", "load": "#1e88e5", "stop": "#43a047"}


def new_figure() -> Figure:
    figure = Figure(figsize=FIG_INCHES, dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def figure_png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def _empty(ax, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="#666")
    ax.set_xticks([])
    ax.set_yticks([])


def load_axis_name(curves: Sequence[tuple]) -> str:
    """The x axis of a per-level plot: concurrency, or request rate for open-loop levels."""
    first = next((levels[0] for _, levels, _ in curves if len(levels)), None)
    return "request rate (req/s)" if is_rate(first) else "concurrency"


def build_throughput_figure(curves: Sequence[tuple[str, Sequence[int], Sequence[float]]]) -> Figure:
    """Output tok/s against concurrency, one line per config: (label, levels, tok/s)."""
    figure = new_figure()
    ax = figure.add_subplot()
    for label, levels, values in curves:
        ax.plot(levels, values, marker="o", label=label)
    if not curves:
        _empty(ax, "no feasible config yet")
    else:
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({c for _, levels, _ in curves for c in levels}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel(load_axis_name(curves))
        ax.set_ylabel("output tok/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax.set_title("Throughput against concurrency (top configs)")
    return figure


def build_latency_figure(series: Sequence[tuple[str, Sequence[int], Mapping[str, Sequence[float]]]]) -> Figure:
    """TTFT and ITL percentiles per level: (label, levels, {"ttft p50": [...], "itl p99": [...]})."""
    figure = new_figure()
    ttft_ax, itl_ax = figure.subplots(1, 2)
    styles = {"p50": "-", "p90": "--", "p99": ":"}
    for index, (label, levels, values) in enumerate(series):
        color = f"C{index}"
        for name, points in values.items():
            kind, pct = name.split()
            ax = ttft_ax if kind == "ttft" else itl_ax
            ax.plot(levels, points, linestyle=styles.get(pct, "-"), marker=".", color=color,
                    label=f"{label} {pct}")
    for ax, title in ((ttft_ax, "TTFT (ms)"), (itl_ax, "ITL (ms)")):
        if not series:
            _empty(ax, "no feasible config yet")
            continue
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({c for _, levels, _ in series for c in levels}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel(load_axis_name(series))
        ax.set_title(title + " p50 / p90 / p99")
        ax.grid(alpha=0.3)
    if series:
        itl_ax.legend(fontsize=7, ncol=1)
    return figure


def build_pareto_figure(points: Sequence[tuple[int, float, float]], front: Sequence[tuple[int, float, float]],
                        latency: str, throughput: str) -> Figure:
    """Throughput against latency: (trial, latency, throughput) of the feasible trials, the front
    highlighted. `latency` and `throughput` name the axes, e.g. "p99_ttft_ms@c1"."""
    figure = new_figure()
    ax = figure.add_subplot()
    if not points:
        _empty(ax, "no feasible config yet")
    else:
        ax.scatter([p[1] for p in points], [p[2] for p in points], color="#90a4ae", label="feasible trials")
        front_sorted = sorted(front, key=lambda p: p[1])
        # a staircase: what the front attains (no config beats it on both axes)
        ax.plot([p[1] for p in front_sorted], [p[2] for p in front_sorted], color="#d81b60", marker="o",
                drawstyle="steps-post", label="Pareto front")
        for trial, lat, tok_s in front_sorted:
            ax.annotate(f"#{trial}", (lat, tok_s), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.set_xlabel(f"{latency} (lower is better)")
        ax.set_ylabel(f"{throughput} (higher is better)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax.set_title(f"Pareto front: {throughput} against {latency}")
    return figure


def build_serving_figure(points: Sequence[tuple[int, int, float, float]]) -> Figure:
    """The serving trade-off plot: tok/s per user (x) against tok/s per GPU (y), one point per
    feasible trial and level, each trial's levels joined in order of concurrency."""
    figure = new_figure()
    ax = figure.add_subplot()
    if not points:
        _empty(ax, "no level with a known GPU count yet")
    else:
        by_trial: dict[int, list[tuple[int, float, float]]] = {}
        for trial, level, user, gpu in points:
            by_trial.setdefault(trial, []).append((level, user, gpu))
        for trial, rows in sorted(by_trial.items()):
            rows.sort()
            ax.plot([r[1] for r in rows], [r[2] for r in rows], marker="o", alpha=0.6, linewidth=1)
        best = max(points, key=lambda p: p[3])
        ax.annotate(f"#{best[0]} {short_level(best[1])}", (best[2], best[3]), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.set_xlabel("output tok/s per user (1 / TPOT)")
        ax.set_ylabel("output tok/s per GPU")
        ax.grid(alpha=0.3)
    ax.set_title("Serving trade-off: per-user speed against per-GPU throughput")
    return figure


def build_importance_figure(importances: Mapping[str, float], note: str) -> Figure:
    figure = new_figure()
    ax = figure.add_subplot()
    if not importances:
        _empty(ax, f"parameter importance not available: {note}")
    else:
        names = list(importances)[::-1]
        ax.barh(names, [importances[n] for n in names], color="#3949ab")
        ax.set_xlabel("importance (fraction of the objective's variance)")
    ax.set_title("Parameter importance (feasible completed trials)")
    return figure


def build_failures_figure(counts: Sequence[tuple[str, str, int]]) -> Figure:
    """Failures by stage and kind: (stage, kind, count)."""
    figure = new_figure()
    ax = figure.add_subplot()
    if not counts:
        _empty(ax, "no failures")
    else:
        labels = [f"{stage} / {kind}" for stage, kind, _ in counts][::-1]
        colors = [STAGE_COLORS.get(stage, "#607d8b") for stage, _, _ in counts][::-1]
        ax.barh(labels, [n for _, _, n in counts][::-1], color=colors)
        ax.set_xlabel("trials")
        ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title("Failures by stage and kind")
    return figure


def build_timeline_figure(rows: Sequence[tuple[int, float, Mapping[str, float]]]) -> Figure:
    """The sweep over time: one bar per trial from its start (seconds since the first trial),
    split into its stages: (trial, start s, {stage: seconds})."""
    figure = new_figure()
    ax = figure.add_subplot()
    if not rows:
        _empty(ax, "no trial has run")
    else:
        seen: set[str] = set()
        for trial, start, stages in rows:
            left = start
            for stage, seconds in stages.items():
                label = stage if stage not in seen else None
                seen.add(stage)
                ax.barh(trial, seconds, left=left, color=STAGE_COLORS.get(stage, "#607d8b"), label=label,
                        height=0.7)
                left += seconds
        ax.invert_yaxis()
        ax.set_xlabel("wall seconds since the first trial started")
        ax.set_ylabel("trial")
        figure.legend(fontsize=8, ncol=6, loc="outside lower center")
        ax.grid(axis="x", alpha=0.3)
    ax.set_title("Timeline of the sweep: time per stage per trial")
    return figure
