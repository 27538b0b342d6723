"""`sweeper report`: the study as one self-contained HTML page and its Markdown twin. Building is
pure (study -> Report); `write_report` is the only function that writes files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import optuna

from sweeper.results import figures
from sweeper.results.report_data import LATENCY_CONFIGS, PERCENTILES, ReportData, build_report_data
from sweeper.results.report_render import format_report_html, format_report_markdown
from sweeper.results.report_sections import build_sections

FIGURES_DIR = "figures"


@dataclass(frozen=True)
class Report:
    html: str
    markdown: str
    pngs: dict[str, bytes]  # figure name -> PNG


def build_figures(data: ReportData) -> dict[str, figures.Figure]:
    latency = [(c.label, list(c.levels),
                {f"{kind} {p.replace('median', 'p50')}": c.series(f"{p}_{kind}_ms")
                 for kind in ("ttft", "itl") for p in PERCENTILES})
               for c in data.top[:LATENCY_CONFIGS]]
    timeline = [(r.trial, r.start_s, r.stage_seconds) for r in data.timeline]
    return {
        "throughput": figures.build_throughput_figure(
            [(c.label, list(c.levels), c.series("output_throughput")) for c in data.top]),
        "latency": figures.build_latency_figure(latency),
        "pareto": figures.build_pareto_figure(data.pareto_points, data.pareto_front, *data.pareto_axes),
        "serving": figures.build_serving_figure(data.serving_points),
        "importance": figures.build_importance_figure(data.importances, data.importance_note),
        "failures": figures.build_failures_figure([(s, k, n) for s, k, n, _ in data.failures]),
        "timeline": figures.build_timeline_figure(timeline),
    }


def build_report(study: optuna.Study) -> Report:
    data = build_report_data(study)
    pngs = {name: figures.figure_png(figure) for name, figure in build_figures(data).items()}
    sections = build_sections(data)
    paths = {name: f"{FIGURES_DIR}/{name}.png" for name in pngs}
    return Report(format_report_html(data.title, sections, pngs),
                  format_report_markdown(data.title, sections, paths), pngs)


def write_report(report: Report, out_dir: Path) -> list[Path]:
    """report.html (self-contained), report.md and the PNGs the Markdown shows."""
    (out_dir / FIGURES_DIR).mkdir(parents=True, exist_ok=True)
    written = [out_dir / "report.html", out_dir / "report.md"]
    written[0].write_text(report.html, encoding="utf-8")
    written[1].write_text(report.markdown, encoding="utf-8")
    for name, png in report.pngs.items():
        path = out_dir / FIGURES_DIR / f"{name}.png"
        path.write_bytes(png)
        written.append(path)
    return written
