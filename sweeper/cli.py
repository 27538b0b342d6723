"""The command line: the only place that prints for the user and chooses exit codes."""

from __future__ import annotations

import signal
import sys
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Iterator, Optional

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from sweeper.config import load_host, load_space
from sweeper.errors import UserError
from sweeper.hosts import Host, open_host
from sweeper.results.leaderboard import best_trial, leaderboard_frame
from sweeper.results.show import format_show
from sweeper.results.table import format_leaderboard_table
from sweeper.resume import check_space_unchanged
from sweeper.study import (
    StudyHandle, controller_alive, create_study, host_spec_for_resume, load_study,
    recover_interrupted, run_sweep,
)

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Find the fastest safe server configuration by measuring it.")
sim_app = typer.Typer(no_args_is_help=True, help="The embedded simulator.")
app.add_typer(sim_app, name="sim")
# Piped output gets a wide page rather than rich's 80 columns, so tables stay readable in logs.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)

RESULTS_OPT = typer.Option(Path("results"), "--results", help="Folder holding one folder per study.")
STORAGE_OPT = typer.Option(None, "--storage", help="Any Optuna storage URL (default: SQLite in the study folder).")


def main() -> None:
    app()


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
    """SIGTERM and SIGHUP stop a sweep the way Ctrl-C does: the server is stopped, the trial kept."""
    def raise_interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, raise_interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


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


def _sweep(handle: StudyHandle, host: Host, top: int) -> None:
    try:
        with interrupts_as_keyboard(), Live("starting", console=console, refresh_per_second=4,
                                             transient=True) as live:
            run_sweep(handle, host, RichEvents(live))
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted:[/] the running server was stopped and the trial recorded. "
                  f"Continue with: sweeper resume {handle.name} --results {handle.results_dir}")
        raise typer.Exit(130) from None
    finally:
        host.close()
    console.print(format_leaderboard_table(handle.study, top))
    console.print(f"study [bold]{handle.name}[/] in {handle.dir}")


@app.command()
def sweep(
    space_file: Path = typer.Argument(..., help="Search-space YAML file."),
    hosts: Path = typer.Option(Path("hosts.yaml"), "--hosts", help="Hosts file."),
    host: str = typer.Option("local", "--host", help="Host name in the hosts file."),
    study: Optional[str] = typer.Option(None, "--study", help="Study name (default: space name + time)."),
    trials: Optional[int] = typer.Option(None, "--trials", min=1, help="Budget of real evaluations."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
    top: int = typer.Option(10, "--top", help="Rows of the leaderboard printed at the end."),
) -> None:
    """Create a study and run it to its budget."""
    with user_errors():
        space = load_space(space_file)
        host_spec = load_host(hosts, host)
        name = study or f"{space.name}-{datetime.now():%Y%m%d-%H%M%S}"
        budget = trials or space.budget.trials
        connected = open_host(host, host_spec)  # before the study exists: an unreachable host leaves nothing
        try:
            handle = create_study(name, space, space_file, host, host_spec, results, storage, budget)
        except BaseException:
            connected.close()
            raise
        _sweep(handle, connected, top)


@app.command()
def resume(
    study: str = typer.Argument(..., help="Study name."),
    trials: Optional[int] = typer.Option(None, "--trials", min=1, help="New budget of real evaluations."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
    top: int = typer.Option(10, "--top"),
    hosts: Path = typer.Option(Path("hosts.yaml"), "--hosts", help="Hosts file: secret env values of the host."),
) -> None:
    """Continue an interrupted study to its budget."""
    with user_errors():
        optuna_study = load_study(study, results, storage)
        attrs = optuna_study.user_attrs
        space = check_space_unchanged(attrs)
        if controller_alive(attrs.get("controller")):
            raise UserError(f"study {study!r} is being run by pid {attrs['controller']['pid']}; "
                            "stop it first")
        if trials:
            optuna_study.set_user_attr("budget", trials)
        host_spec = host_spec_for_resume(attrs, hosts)
        handle = StudyHandle(optuna_study, space, attrs["host_name"], host_spec, results)
        host = open_host(handle.host_name, host_spec)
        try:
            for note in recover_interrupted(optuna_study, host, space.launch.stop_grace_s):
                console.print(f"[yellow]recovery:[/] {note}")
        except BaseException:
            host.close()
            raise
        _sweep(handle, host, top)


@app.command()
def leaderboard(
    study: str = typer.Argument(...),
    top: int = typer.Option(10, "--top", help="Rows shown."),
    csv: Optional[Path] = typer.Option(None, "--csv", help="Write every trial, one row each, to this CSV."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """The trials ranked by the objective; failures and duplicates never rank."""
    with user_errors():
        optuna_study = load_study(study, results, storage)
        console.print(format_leaderboard_table(optuna_study, top))
        if csv:
            leaderboard_frame(optuna_study).to_csv(csv, index=False)
            console.print(f"wrote {csv}")


@app.command()
def show(
    study: str = typer.Argument(...),
    watch: bool = typer.Option(False, "--watch", help="Refresh from storage until Ctrl-C."),
    interval: float = typer.Option(2.0, "--interval", min=0.2, help="Seconds between refreshes."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """Trials by state, the best so far, and what is running."""
    with user_errors():
        optuna_study = load_study(study, results, storage)
        if not watch:
            console.print(format_show(optuna_study))
            return
        # Re-read from storage on every refresh: works from another terminal or machine.
        try:
            with Live(format_show(optuna_study), console=console, refresh_per_second=1) as live:
                while True:
                    time.sleep(interval)
                    live.update(format_show(load_study(study, results, storage)))
        except KeyboardInterrupt:
            pass


@app.command()
def best(
    study: str = typer.Argument(...),
    script: bool = typer.Option(False, "--script", help="Print a ready-to-run launch script."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """The best feasible config of a study (as a launch script with --script)."""
    from sweeper.config import HostSpec, parse_space
    from sweeper.results.script import best_launch_script

    with user_errors():
        optuna_study = load_study(study, results, storage)
        attrs = optuna_study.user_attrs
        space = parse_space(attrs["space_text"], f"{attrs['space_path']} (copy stored in the study)")
        host_spec = HostSpec.model_validate(attrs["host_spec"])
        text = best_launch_script(optuna_study, space, host_spec)
        if text is None:
            raise UserError(f"study {study!r} has no feasible trial yet")
        if script:
            typer.echo(text, nl=False)
        else:
            trial = best_trial(optuna_study)
            console.print(f"trial {trial.number}: {trial.value:.2f}  {trial.params}")


@sim_app.command("best")
def sim_best(
    space_file: Path = typer.Argument(..., help="Search-space YAML file (engine: sim)."),
    study: Optional[str] = typer.Option(None, "--study", help="Also compare this study's best with the optimum."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """The simulator's exact optimum for a space, from its performance model."""
    from sweeper.sim.best import best_config, modelled_objective

    with user_errors():
        space = load_space(space_file)
        result = best_config(space)
        table = Table(title=f"simulator optimum of {space.name} ({result.feasible} feasible of {result.total} configs)")
        table.add_column("parameter")
        table.add_column("value")
        for name, value in result.config.items():
            table.add_row(name, str(value))
        console.print(table)
        console.print(f"modelled {space.objective.metric} at C={space.objective_level}: "
                      f"[bold]{result.value:.2f}[/]")
        if study:
            best = best_trial(load_study(study, results, storage))
            if best is None:
                raise UserError(f"study {study!r} has no feasible trial yet")
            modelled = modelled_objective(space, best.params)
            console.print(f"study {study}: best trial {best.number} measured {best.value:.2f}, modelled "
                          f"{modelled:.2f} = {100 * modelled / result.value:.1f}% of the optimum")


if __name__ == "__main__":
    sys.exit(main())
