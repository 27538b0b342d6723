"""The CLI in this process (typer's CliRunner) where no subprocess is what a test looks at: no
interpreter start-up and import per call."""

from __future__ import annotations

import os
from pathlib import Path

from typer.testing import CliRunner, Result

from sweeper.cli import app


def invoke_in(workdir: Path, *args: str) -> Result:
    """`sweeper ARGS` run in `workdir` (the current directory, as a user's shell has it), in-process."""
    old = Path.cwd()
    os.chdir(workdir)
    try:
        return CliRunner().invoke(app, list(args))
    finally:
        os.chdir(old)
