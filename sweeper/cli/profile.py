"""`sweeper profile` (a trial's config relaunched under the engine's torch profiler) and
`sweeper kernels` (the kernel table of saved traces)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from sweeper.cli.common import STUDY_ARG, picked_study, RESULTS_OPT, STORAGE_OPT, console, err, interrupts_as_keyboard, user_errors


def profile(
    study: Optional[str] = STUDY_ARG,
    trial: Optional[int] = typer.Option(None, "--trial", min=0, help="Profile this trial's config."),
    best_config: bool = typer.Option(False, "--best", help="Profile the study's best feasible config."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", min=1, help="Requests in flight (default: the objective's level)."),
    seconds: float = typer.Option(5.0, "--seconds", help="Seconds of load under the profiler."),
    top: int = typer.Option(15, "--top", min=1, help="Kernels listed."),
    hosts: Path = typer.Option(Path("hosts.yaml"), "--hosts", help="Hosts file: secret env values of the host."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """Relaunch a trial's config with the engine's torch profiler on, drive load, and print the top
    kernels by share of GPU time (attention, MoE/GEMM, communication, other)."""
    # lazy for CLI start-up (cli/__init__.py)
    from sweeper.profile.command import profile_study_trial

    with user_errors():
        study, optuna_study = picked_study(study, results, storage)
        try:
            with interrupts_as_keyboard():
                result = profile_study_trial(optuna_study, results, hosts, trial, best_config, concurrency,
                                             seconds, top, on_step=lambda m: err.print(f"[dim]{m}[/]", highlight=False))
        except KeyboardInterrupt:
            err.print("[yellow]interrupted:[/] the profiled server was stopped")
            raise typer.Exit(130) from None
        console.print(result.text, markup=False, highlight=False, end="")
        console.print(f"saved in {result.dir}: profile.json, profile.txt, traces/")
        for warning in result.record["warnings"]:
            err.print(f"[yellow]warning:[/] {warning}", highlight=False)


def kernels(
    traces: list[Path] = typer.Argument(..., help="Torch profiler traces (.json, .json.gz) or folders of them."),
    top: int = typer.Option(15, "--top", min=1, help="Kernels listed."),
    as_json: bool = typer.Option(False, "--json", help="Print the table as JSON to stdout instead."),
    json_file: Optional[Path] = typer.Option(None, "--json-file", help="Also write the table as JSON here."),
) -> None:
    """The kernel table of saved torch profiler traces (from `sweeper profile` or any engine)."""
    import json as json_module

    # lazy for CLI start-up (cli/__init__.py)
    from sweeper.profile.command import summarize_trace_files

    with user_errors():
        result = summarize_trace_files(traces, top)
        if as_json:
            typer.echo(json_module.dumps(result.record, indent=2))
        else:
            console.print(result.text, markup=False, highlight=False, end="")
        if json_file:
            json_file.write_text(json_module.dumps(result.record, indent=2))
            (err if as_json else console).print(f"wrote {json_file}")
