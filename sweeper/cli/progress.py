"""A sweep's progress for people: the live line of one controller, plain lines of many workers,
and how a run of trials ends (the leaderboard, or how to resume after Ctrl-C)."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.live import Live

from sweeper.cli.common import console, err, interrupts_as_keyboard
from sweeper.hosts import Host, open_host
from sweeper.results.table import format_leaderboard_table
from sweeper.search.study import StudyHandle, create_study, run_sweep
from sweeper.spec.hosts import load_host
from sweeper.spec.space import Space


class RichEvents:
    """Progress while sweeping: trial n of N, stage, elapsed, best so far."""

    def __init__(self, live: Live):
        self.live, self.number, self.evaluation, self.budget = live, None, 0, 0
        self.stage_name, self.started, self.best = "", time.monotonic(), None

    def render(self) -> str:
        elapsed = time.monotonic() - self.started
        best = "-" if self.best is None else f"{self.best:.2f}"
        return (f"[bold]trial {self.number}[/] (evaluation {self.evaluation} of {self.budget})  "
                f"stage [cyan]{self.stage_name}[/]  elapsed {elapsed:5.0f}s  best {best}")

    def trial_started(self, number, evaluation, budget, config):
        self.number, self.evaluation, self.budget = number, evaluation, budget
        settings = " ".join(f"{k}={v}" for k, v in config.items())
        self.live.console.print(f"trial {number}: {settings}", highlight=False)
        self.live.update(self.render())

    def stage(self, number, stage):
        self.stage_name = stage
        self.live.update(self.render())

    def trial_finished(self, number, summary, best):
        self.best = best
        self.live.console.print(f"  -> trial {number}: {summary}", highlight=False)
        self.live.update(self.render())


class WorkerEvents:
    """A worker's progress as plain lines, each prefixed with its host slot (several workers share
    one terminal, so no live line)."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def trial_started(self, number, evaluation, budget, config):
        settings = " ".join(f"{k}={v}" for k, v in config.items())
        console.print(f"[{self.prefix}] trial {number} (evaluation {evaluation} of {budget}): {settings}",
                      highlight=False, markup=False)

    def stage(self, number, stage):
        pass

    def trial_finished(self, number, summary, best):
        console.print(f"[{self.prefix}]   -> trial {number}: {summary}", highlight=False, markup=False)


def with_progress(handle: StudyHandle, host: Host, run) -> None:
    """Run trials with the live progress line; Ctrl-C stops the server and says how to resume."""
    try:
        with interrupts_as_keyboard(), Live("starting", console=console, refresh_per_second=4,
                                             transient=True) as live:
            run(RichEvents(live))
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted:[/] the running server was stopped and the trial recorded. "
                  f"Continue with: sweeper resume {handle.name} --results {handle.results_dir}")
        raise typer.Exit(130) from None
    finally:
        host.close()


def sweep_and_print(handle: StudyHandle, host: Host, top: int, seed: int | None = None,
           time_budget_s: float | None = None) -> None:
    with_progress(handle, host, lambda events: run_sweep(handle, host, events, seed, time_budget_s))
    console.print(format_leaderboard_table(handle.study, top))
    console.print(f"study [bold]{handle.name}[/] in {handle.dir}")


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
