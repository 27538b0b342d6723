"""`sweeper init`: a space and a hosts file to start from, copied from the package's templates."""

from __future__ import annotations

import shutil
from pathlib import Path

import typer

from sweeper.cli.common import console, user_errors
from sweeper.errors import UserError, did_you_mean
from sweeper.spaces import HOSTS_TEMPLATE, packaged_file, packaged_spaces


def init(
    folder: Path = typer.Argument(Path("."), help="Where to write space.yaml and hosts.yaml."),
    template: str = typer.Option("demo", "--template", help="The packaged space to start from: demo (the "
                                 "simulator, runs anywhere), dsv4-flash-sm120 (the case study: SGLang, 8 GPUs), "
                                 "vllm-moe-example."),
    force: bool = typer.Option(False, "--force", help="Overwrite space.yaml and hosts.yaml if they exist."),
) -> None:
    """Write space.yaml (a packaged space) and hosts.yaml (this machine, and a commented SSH host)
    to edit; then `sweeper doctor space.yaml`."""
    with user_errors():
        spaces = packaged_spaces()
        if template not in spaces:
            raise UserError(f"--template {template!r}: not a packaged space ({', '.join(sorted(spaces))})"
                            + did_you_mean(template, spaces))
        targets = {folder / "space.yaml": spaces[template], folder / "hosts.yaml": packaged_file(HOSTS_TEMPLATE)}
        if not force and (taken := [str(p) for p in targets if p.exists()]):
            raise UserError(f"{', '.join(taken)} already exist: nothing written (--force overwrites)")
        folder.mkdir(parents=True, exist_ok=True)
        for target, source in targets.items():
            shutil.copyfile(source, target)
        console.print(f"wrote {folder / 'space.yaml'} (from {template}) and {folder / 'hosts.yaml'}; next:\n"
                      f"  sweeper doctor {folder / 'space.yaml'}\n  sweeper sweep {folder / 'space.yaml'}",
                      highlight=False, markup=False)
