"""`sweeper leaderboard`, `report`, `show` and `best`: what a study found, read from storage."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Callable, Optional

import optuna
import typer
from rich.live import Live

from sweeper.cli.common import STUDY_ARG, pick_study, picked_study, RESULTS_OPT, STORAGE_OPT, console, err, user_errors
from sweeper.errors import UserError
from sweeper.results.show import build_best_record, build_show_record, format_show
from sweeper.results.table import format_leaderboard_table
from sweeper.study.stored import parse_stored_space
from sweeper.study.store import open_study_storage
from sweeper.results.answer import build_answer, format_answer_lines
from sweeper.results.ranking import best_ranked_trial
from sweeper.study.trials import chosen_trial, is_pareto_study
from sweeper.spec.hosts import HostSpec


def leaderboard(
    study: Optional[str] = STUDY_ARG,
    top: Optional[int] = typer.Option(None, "--top", min=1, help="Rows shown (default 10) and, when given, rows exported."),
    level: Optional[str] = typer.Option(None, "--level", help="Rank by the objective's metric at this level: a concurrency, or a request rate (r2.5 or 2.5) of an open-loop study."),
    feasible_only: bool = typer.Option(False, "--feasible-only", help="Only trials that rank."),
    csv: Optional[Path] = typer.Option(None, "--csv", help="Write the rows, one per trial, to this CSV."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows to stdout as JSON (a list of records) "
                                 "instead of the table."),
    json_file: Optional[Path] = typer.Option(None, "--json-file", help="... to this JSON file (a list of records)."),
    parquet: Optional[Path] = typer.Option(None, "--parquet", help="... to this Parquet file."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """The trials ranked by the objective; failures, duplicates and invalid levels never rank."""
    # lazy for CLI start-up (cli/__init__.py)
    from sweeper.results.export import build_export_frame, write_export

    with user_errors():
        study, optuna_study = picked_study(study, results, storage)
        exports = [(path, fmt) for path, fmt in ((csv, "csv"), (json_file, "json"), (parquet, "parquet")) if path]
        frame = build_export_frame(optuna_study, level, feasible_only, top) if exports or as_json else None
        if as_json:
            typer.echo(frame.to_json(orient="records", indent=1))
        else:
            console.print(format_leaderboard_table(optuna_study, top or 10, level, feasible_only))
        for path, fmt in exports:
            (err if as_json else console).print(f"wrote {write_export(frame, path, fmt)}")


def report(
    study: Optional[str] = STUDY_ARG,
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for report.html and report.md (default: the study's folder)."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """One self-contained HTML report (and its Markdown twin), rebuilt from storage."""
    # lazy for CLI start-up (cli/__init__.py)
    from sweeper.results.report import build_report, write_report

    with user_errors():
        study, optuna_study = picked_study(study, results, storage)
        written = write_report(build_report(optuna_study), out or results / study)
        console.print(f"wrote {written[0]} and {written[1]}")


def show(
    study: Optional[str] = STUDY_ARG,
    watch: bool = typer.Option(False, "--watch", help="Refresh from storage until Ctrl-C."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object to stdout (for scripts)."),
    interval: float = typer.Option(2.0, "--interval", min=0.2, help="Seconds between refreshes."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """Trials by state, the best so far, and what is running."""
    with user_errors():
        study = pick_study(study, results, storage)
        rdb = open_study_storage(study, results, storage)  # one for every refresh: no engine per poll
        optuna_study = optuna.load_study(study_name=study, storage=rdb)
        if as_json:
            typer.echo(json.dumps(build_show_record(optuna_study), default=jsonable))
            return
        if not watch:
            console.print(format_show(optuna_study))
            return
        try:
            watch_show(optuna_study, lambda: optuna.load_study(study_name=study, storage=rdb), interval)
        except KeyboardInterrupt:
            pass


def watch_show(first: optuna.Study, reload: Callable[[], optuna.Study], interval: float) -> None:
    """`show` again every `interval` seconds, re-read from storage (so it follows a sweep run from
    another terminal or machine): on a terminal one live view; piped (a log, a script, `tee`) each
    view is printed once, when it changes, since a live view writes nothing there until it ends."""
    if console.is_terminal:
        with Live(format_show(first), console=console, refresh_per_second=1) as live:
            while True:
                time.sleep(interval)
                live.update(format_show(reload()))
    shown, study = None, first
    while True:
        with console.capture() as view:
            console.print(format_show(study))
        if view.get() != shown:
            shown = view.get()
            typer.echo(shown)
        time.sleep(interval)
        study = reload()


def best(
    study: Optional[str] = STUDY_ARG,
    script: bool = typer.Option(False, "--script", help="Print a ready-to-run launch script."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object to stdout: trial, params, value, "
                                 "ci_low, ci_high, ci_source, validated, launches, tied_with (null: unknown), "
                                 "tie_rule, why, noise_floor."),
    trial_number: Optional[int] = typer.Option(None, "--trial", help="This feasible trial instead of the best (e.g. a member of the Pareto front)."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """The best feasible config of a study (as a launch script with --script); in the Pareto mode,
    the front."""
    # lazy for CLI start-up (cli/__init__.py)
    from sweeper.results.script import best_launch_script

    with user_errors():
        study, optuna_study = picked_study(study, results, storage)
        if as_json:
            if (record := build_best_record(optuna_study)) is None:
                raise UserError(f"study {study!r} has no feasible trial yet")
            typer.echo(json.dumps(record, default=jsonable))
            return
        attrs = optuna_study.user_attrs
        space = parse_stored_space(attrs)
        host_spec = HostSpec.model_validate(attrs["host_spec"])
        chosen = chosen_trial(optuna_study, trial_number) if trial_number is not None else None
        text = best_launch_script(optuna_study, space, host_spec, chosen)
        if text is None:
            raise UserError(f"study {study!r} has no feasible trial yet")
        if script:
            typer.echo(text, nl=False)
        elif is_pareto_study(optuna_study) and chosen is None:
            console.print(format_leaderboard_table(optuna_study, len(optuna_study.trials), feasible_only=True))
        elif chosen is None and (answer := build_answer(optuna_study)) is not None:
            winner, *more = format_answer_lines(answer)  # the study's answer: as the report and the script say it
            console.print(f"{winner}  {answer.params}", highlight=False, markup=False)
            for line in more:
                console.print(line, highlight=False, markup=False)
        else:
            trial = chosen or best_ranked_trial(optuna_study)
            console.print(f"trial {trial.number}: {', '.join(f'{v:.2f}' for v in trial.values)}  {trial.params}")


def jsonable(value):
    """JSON for what the records hold besides plain data (dataclasses such as the gap to target)."""
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
