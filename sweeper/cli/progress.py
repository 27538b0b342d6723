"""A sweep's progress for people: the live line of one controller, plain lines of many workers,
and how a run of trials ends (the leaderboard, or how to resume after Ctrl-C)."""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Iterator

import typer
from rich.live import Live

from sweeper.cli.common import OUTPUT, VERBOSE_LINES, console, err, interrupts_as_keyboard, write_log_file
from sweeper.hosts import Host, open_host
from sweeper.results.table import format_leaderboard_table
from sweeper.errors import UserError
from sweeper.study.store import StudyHandle, create_study, never_started, enqueue_space_seeds
from sweeper.study.runs import run_sweep
from sweeper.study.verdict import build_sweep_verdict, format_verdict
from sweeper.spec.hosts import load_host
from sweeper.levels import Level, is_rate, short_level
from sweeper.spec.space import Space
from sweeper.redact import redact_url


def format_level_line(level: Level, metrics: dict) -> str:
    """One level's result in a line: throughput, TTFT (an open loop: the rate it achieved), and
    the verdict with its reasons."""
    verdict = "valid" if metrics.get("valid") else "invalid: " + "; ".join(metrics.get("invalid_reasons") or [])
    achieved = metrics.get("achieved_request_rate")
    sent = f"{achieved:.2f} req/s achieved, " if is_rate(level) and achieved is not None else ""
    return (f"{short_level(level)}: {sent}{metrics.get('output_throughput', float('nan')):.1f} output tok/s, "
            f"TTFT p50 {metrics.get('median_ttft_ms', float('nan')):.1f} ms, {verdict}")


class RichEvents:
    """Progress on a terminal: a live line (trial n of N, stage, elapsed, best so far) above the
    lines of started trials, level results and finished trials."""

    def __init__(self, live: Live):
        self.live, self.name, self.evaluation, self.budget = live, None, 0, 0
        self.stage_name, self.started, self.best = "", time.monotonic(), None

    def render(self) -> str:
        elapsed = time.monotonic() - self.started
        best = "-" if self.best is None else f"{self.best:.2f}"
        return (f"[bold]{self.name}[/] (evaluation {self.evaluation} of {self.budget})  "
                f"stage [cyan]{self.stage_name}[/]  elapsed {elapsed:5.0f}s  best {best}")

    def trial_started(self, name, evaluation, budget, config):
        self.name, self.evaluation, self.budget = name, evaluation, budget
        settings = " ".join(f"{k}={v}" for k, v in config.items())
        self.live.console.print(f"{name}: {settings}", highlight=False)
        self.live.update(self.render())

    def stage(self, name, stage):
        self.stage_name = stage
        self.live.update(self.render())

    def level(self, name, level, metrics):
        self.live.console.print(f"     {format_level_line(level, metrics)}", highlight=False, markup=False)

    def trial_finished(self, name, summary, best):
        self.best = best
        self.live.console.print(f"  -> {name}: {summary}", highlight=False)
        self.live.update(self.render())

    def note(self, text):  # a --verbose line (an engine's log tail, an SSH event)
        self.live.console.print(text, highlight=False, markup=False, soft_wrap=True)


class LineEvents:
    """Progress as timestamped plain lines, one per trial start, stage change, level result and
    finish: for logs (no terminal: CI, nohup, tmux logging) and for workers sharing one terminal
    (each line prefixed with its host slot). A stage silent for OUTPUT.heartbeat_s gets a
    heartbeat line (stage, elapsed, the engine's newest log line), so a long model load does not
    look like a hang (`heartbeat()`, run by a thread while the run lasts)."""

    def __init__(self, prefix: str | None = None, show: bool = True):
        self.prefix, self.show = (f"[{prefix}] " if prefix else ""), show
        self.name, self.stage_name, self.stage_started = None, "", 0.0
        self.last_said, self.engine_line = time.monotonic(), ""

    def say(self, text: str, wrap: bool = True) -> None:
        self.last_said = time.monotonic()
        line = f"{datetime.now():%H:%M:%S} {self.prefix}{text}"
        if self.show and not OUTPUT.quiet:
            console.print(line, highlight=False, markup=False, soft_wrap=not wrap)
        write_log_file(line)

    def trial_started(self, name, evaluation, budget, config):
        self.say(f"{name} (evaluation {evaluation} of {budget}): "
                 + " ".join(f"{k}={v}" for k, v in config.items()))

    def stage(self, name, stage):
        self.name, self.stage_name, self.stage_started, self.engine_line = name, stage, time.monotonic(), ""
        self.say(f"{name}: {stage}")

    def level(self, name, level, metrics):
        self.say(f"{name}: {format_level_line(level, metrics)}")

    def trial_finished(self, name, summary, best):
        self.name = None
        self.say(f"  -> {name}: {summary}")

    def note(self, text):
        self.say(text, wrap=False)  # log lines as the engine wrote them

    def engine_log(self, line: str) -> None:
        self.engine_line = line

    def heartbeat(self) -> None:
        """A line when the running stage has been silent for OUTPUT.heartbeat_s."""
        now = time.monotonic()
        if self.name is None or now - self.last_said < OUTPUT.heartbeat_s:
            return
        engine = f"; engine log: {self.engine_line.strip()[:200]}" if self.engine_line.strip() else ""
        self.say(f"{self.name}: {self.stage_name}, {now - self.stage_started:.0f}s{engine}")


class EngineLines(logging.Handler):
    """The engine's newest log line (trial/launch.py `engine_lines`) to a LineEvents."""

    def __init__(self, events: LineEvents):
        super().__init__(logging.INFO)
        self.events = events

    def emit(self, record: logging.LogRecord) -> None:
        self.events.engine_log(record.getMessage())


@contextmanager
def heartbeats(events: LineEvents) -> Iterator[None]:
    """While the run lasts: the engine's log lines to `events`, and its heartbeat checked each second."""
    logger, handler, done = logging.getLogger("sweeper.engine_log"), EngineLines(events), threading.Event()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    thread = threading.Thread(target=lambda: [events.heartbeat() for _ in iter(lambda: done.wait(1.0), True)],
                              name="heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        logger.removeHandler(handler)


class Both:
    """Each event to two listeners (the live line on the terminal, the log file's lines)."""

    def __init__(self, first, second):
        self.listeners = (first, second)

    def trial_started(self, name, evaluation, budget, config):
        for listener in self.listeners:
            listener.trial_started(name, evaluation, budget, config)

    def stage(self, name, stage):
        for listener in self.listeners:
            listener.stage(name, stage)

    def level(self, name, level, metrics):
        for listener in self.listeners:
            listener.level(name, level, metrics)

    def trial_finished(self, name, summary, best):
        for listener in self.listeners:
            listener.trial_finished(name, summary, best)

    def note(self, text):
        for listener in self.listeners:
            listener.note(text)


@contextmanager
def verbose_lines_to(events) -> Iterator[None]:
    """--verbose lines go through `events` (its note) while it shows a run's progress."""
    previous, VERBOSE_LINES.sink = VERBOSE_LINES.sink, events.note
    try:
        yield
    finally:
        VERBOSE_LINES.sink = previous


def with_progress(handle: StudyHandle, host: Host, run, resume: str | None = None) -> None:
    """Run trials with their progress shown (a live line on a terminal, else plain lines); Ctrl-C
    stops the server and says how to resume (`resume`: the study to name there, when the trials
    are another's part, as a campaign's validation is)."""
    try:
        with interrupts_as_keyboard():
            if console.is_terminal and not OUTPUT.quiet:
                with Live("starting", console=console, refresh_per_second=4, transient=True) as live:
                    events = Both(RichEvents(live), LineEvents(show=False))
                    with verbose_lines_to(events):
                        run(events)
            else:
                events = LineEvents()
                with verbose_lines_to(events), heartbeats(events):
                    run(events)
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted:[/] the running server was stopped and the trial recorded. "
                  f"Continue with: sweeper resume {resume or handle.name} --results {handle.results_dir}")
        raise typer.Exit(130) from None
    finally:
        host.close()


def sweep_and_print(handle: StudyHandle, host: Host, top: int, seed: int | None = None,
                    time_budget_s: float | None = None) -> None:
    try:
        with_progress(handle, host, lambda events: run_sweep(handle, host, events, seed, time_budget_s))
    except UserError as exc:
        if not never_started(handle.study):
            raise
        raise UserError(f"{exc}\nnothing ran: once that is fixed, run the same command again (the study name "
                        f"{handle.name} stays free while it holds no trial)") from None
    console.print(format_leaderboard_table(handle.study, top))
    console.print(f"study [bold]{handle.name}[/] in {handle.dir}")
    exit_on_verdict(handle)


def exit_on_verdict(handle: StudyHandle) -> None:
    """The run's last line (what was measured, the best, the failures by cause); exit 1 when it
    measured nothing or every trial failed for one cause, so that a script can trust exit 0."""
    verdict = build_sweep_verdict(handle.study, handle.budget)
    line = format_verdict(handle.name, verdict)
    write_log_file(line)
    if verdict.ok:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
        return
    err.print(f"[bold red]error:[/] {line}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def open_new_study(space_file: Path, space: Space, hosts: Path, host: str, name: str, results: Path,
                   storage: str | None, budget: int, sampler: str | None,
                   enqueue_seeds: bool = True, space_text: str | None = None) -> tuple[StudyHandle, Host]:
    host_spec = load_host(hosts, host)
    connected = open_host(host, host_spec)  # before the study exists: an unreachable host leaves nothing
    try:
        return create_study(name, space, space_file, host, host_spec, results, storage, budget, sampler,
                            enqueue_seeds, space_text), connected
    except BaseException:
        connected.close()
        raise


def warm_start_study(handle: StudyHandle, texts: list[str]) -> None:
    """`--warm-start`: seeds, broken configs and the reference of earlier studies into a new study
    created without its seeds (they are queued here, after the warm ones); what carried over is printed."""
    # lazy for CLI start-up (cli/__init__.py)
    from sweeper.study.warm import apply_warm_start, build_warm_start, format_warm_lines, load_warm_sources

    if not texts:
        enqueue_space_seeds(handle.study, handle.space)
        return
    warm = build_warm_start(handle.space, load_warm_sources(texts, handle.results_dir))
    apply_warm_start(handle.study, handle.dir, handle.space, warm, [redact_url(t) for t in texts])
    for line in format_warm_lines(warm):
        console.print(line, highlight=False, markup=False)
