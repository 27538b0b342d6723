"""The `sweeper` app: its global options and every command group, registered in one place."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

import sweeper

from sweeper.models.cli import models_app
from sweeper.cli import load as load_commands, profile as profile_commands, results as results_commands
from sweeper.cli.campaign import campaign
from sweeper.cli.doctor import doctor
from sweeper.cli.init import init
from sweeper.cli import sim as sim_commands, sweep as sweep_commands, validate as validate_commands
from sweeper.cli.common import set_output, user_errors

app = typer.Typer(no_args_is_help=True,
                  help="Find the fastest safe server configuration by measuring it.")
sim_app = typer.Typer(no_args_is_help=True, help="The embedded simulator.")
app.add_typer(sim_app, name="sim")
app.add_typer(models_app, name="models")
for command in (init, doctor, campaign, sweep_commands.sweep, sweep_commands.resume, sweep_commands.worker, sweep_commands.demo,
                results_commands.leaderboard, results_commands.show, results_commands.best, results_commands.report,
                validate_commands.ablate, validate_commands.validate, load_commands.load,
                profile_commands.profile, profile_commands.kernels):
    app.command()(command)
sim_app.command("best")(sim_commands.sim_best)


def print_version(wanted: bool) -> None:
    if wanted:
        typer.echo(f"sweeper {sweeper.__version__}")
        raise typer.Exit()


@app.callback()
def options(
    version: bool = typer.Option(False, "--version", callback=print_version, is_eager=True,
                                 help="Print the version and exit."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines (tables and errors still print)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also the engine's log tail when a stage fails "
                                 "or a server is slow to get ready, and SSH connects, reconnects and port forwards."),
    log_file: Optional[Path] = typer.Option(None, "--log-file", help="Also append every progress line, "
                                            "timestamped, to this file."),
    progress_every: float = typer.Option(30.0, "--progress-every", min=0.5, help="Without a terminal (piped, "
                                         "nohup): a line when a stage has been silent this many seconds (its "
                                         "elapsed time and the engine's newest log line)."),
) -> None:
    """Find the fastest safe server configuration by measuring it."""
    with user_errors():
        set_output(quiet, verbose, log_file, progress_every)


def main() -> None:
    app()
