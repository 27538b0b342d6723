"""What every command shares: the consoles, the common options, errors as exits, signals as Ctrl-C."""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator

import optuna
import typer
from rich.console import Console

from sweeper.errors import UserError
from sweeper.spaces import find_space_file
from sweeper.study.store import format_known_studies, load_study, study_names
from sweeper.interrupts import signals_as_interrupt, stopping
from sweeper.study.storage import StorageBusy

# Piped output gets a wide page rather than rich's 80 columns, so tables stay readable in logs.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


class Output:
    """How much progress a command shows, and where else it goes (the app's --quiet, --verbose,
    --log-file)."""

    quiet = False
    verbose = False
    log_file: Path | None = None
    heartbeat_s = 30.0  # piped: a line when a stage has been silent this long (--progress-every)


OUTPUT = Output()


def write_log_file(line: str) -> None:
    """One progress line into --log-file, when one is given."""
    if OUTPUT.log_file is not None:
        with OUTPUT.log_file.open("a") as log:
            log.write(line + "\n")


class VerboseLines(logging.Handler):
    """--verbose: the records of sweeper's own loggers (an engine's log tail when a stage fails or
    it is slow to get ready, SSH connects, reconnects and port forwards) as progress lines: through
    the running progress view (`sink`, its `note`), else timestamped on stderr and the log file."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.sink: Callable[[str], None] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad log call must not stop a sweep
            self.handleError(record)
            return
        if self.sink is not None:
            self.sink(text)
            return
        line = f"{datetime.now():%H:%M:%S} {text}"
        err.print(line, highlight=False, markup=False, soft_wrap=True)
        write_log_file(line)


VERBOSE_LINES = VerboseLines()


def set_output(quiet: bool, verbose: bool, log_file: Path | None, heartbeat_s: float = 30.0) -> None:
    """The app's output options; --verbose routes the `sweeper` loggers' INFO records to VERBOSE_LINES."""
    if quiet and verbose:
        raise UserError("--verbose and --quiet contradict each other: give one of them")
    OUTPUT.quiet, OUTPUT.verbose, OUTPUT.log_file, OUTPUT.heartbeat_s = quiet, verbose, log_file, heartbeat_s
    logger = logging.getLogger("sweeper")
    if verbose and VERBOSE_LINES not in logger.handlers:
        logger.setLevel(logging.INFO)
        logger.addHandler(VERBOSE_LINES)

def space_argument(path: Path) -> Path:
    """A SPACE argument: a file, or the name of a space shipped in the package (demo, ...)."""
    return find_space_file(path)


SPACE_ARG = typer.Argument(..., help="Search-space YAML file, or a packaged space's name (demo, dsv4-flash-sm120, "
                           "vllm-moe-example).", callback=space_argument)
RESULTS_OPT = typer.Option(Path("results"), "--results", help="Folder holding one folder per study.")
STORAGE_OPT = typer.Option(None, "--storage", envvar="SWEEPER_STORAGE",
                           help="Any Optuna storage URL, or $SWEEPER_STORAGE (default: SQLite in the study folder).")
WARM_START_OPT = typer.Option(None, "--warm-start", help="An earlier study of the same engine and model: NAME "
                              "(under --results) or STORAGE_URL#NAME; repeatable. Its best configs run first, "
                              "the configs it proved broken are skipped, its reference carries over.")


STUDY_ARG = typer.Argument(None, help="Study name (may be left out when --results holds one study).")


def pick_study(study: str | None, results: Path, storage: str | None) -> str:
    """The STUDY argument, or the only study there is; else a UserError listing them."""
    if study is not None:
        return study

    names = study_names(results, storage)
    if len(names) == 1:
        return names[0]
    raise UserError(f"name the study: {format_known_studies(names)}" + ("" if names else f" (under {results})"))


def picked_study(study: str | None, results: Path, storage: str | None) -> tuple[str, optuna.Study]:
    """The STUDY argument (or the only study there is) and that study, loaded."""
    name = pick_study(study, results, storage)
    return name, load_study(name, results, storage)


def parse_duration(text: str) -> float:
    """'6h', '90m', '45s' or plain seconds -> seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    try:
        if text[-1:] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        raise UserError(f"--time-budget: expected a duration like 6h, 90m or 45s, got {text!r}") from None


@contextmanager
def user_errors() -> Iterator[None]:
    """A UserError becomes one red line and an exit code; anything else keeps its traceback."""
    try:
        yield
    except UserError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None


@contextmanager
def interrupts_as_keyboard() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP stop a sweep the same way: the server is stopped, the trial kept.
    The signal is held while a storage call is under way (sweeper/interrupts.py); a storage left
    locked by another process while stopping is an interrupt too (the trial stays RUNNING, and
    `resume` marks it interrupted)."""
    with signals_as_interrupt():
        try:
            yield
        except StorageBusy as exc:
            if not stopping():
                raise
            err.print(f"[yellow]warning:[/] the last trial could not be recorded: {exc}", highlight=False,
                      soft_wrap=True)
            raise KeyboardInterrupt from None
