"""`sweeper doctor SPACE --host NAME`: one line per check, exit 1 when any is a problem."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from sweeper.cli.common import SPACE_ARG, console, user_errors
from sweeper.spec.hosts import load_host
from sweeper.spec.space_file import load_space
from sweeper.workflows.doctor_checks import Check, run_checks


def doctor(
    space_file: Path = SPACE_ARG,
    host: str = typer.Option("local", "--host"),
    hosts: Path = typer.Option(Path("hosts.yaml"), "--hosts"),
    as_json: bool = typer.Option(False, "--json", help="Print the checks as a JSON list."),
) -> None:
    """Check everything a sweep needs (host, python, engine, flags, model, GPUs, port, disk) and print
    the seeds' command lines, without launching a server or writing results."""
    with user_errors():
        space = load_space(space_file)
        spec = load_host(hosts, host)
    checks = run_checks(space, host, spec)
    if as_json:
        typer.echo(json.dumps([c.to_dict() for c in checks], indent=2))
    else:
        for check in checks:
            console.print(format_check(check), highlight=False, soft_wrap=True, markup=False)
    if not all(c.ok for c in checks):
        raise typer.Exit(1)


def format_check(check: Check) -> str:
    if check.skipped:
        return f"skipped  {check.name}: {check.detail}"
    if check.ok and check.warning:
        return f"warning  {check.name}: {check.detail}"
    if check.ok:
        return f"ok       {check.name}: {check.detail}"
    return f"problem  {check.name}: {check.detail}" + (f"\n         fix: {check.fix}" if check.fix else "")
