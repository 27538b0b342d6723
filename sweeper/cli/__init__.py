"""The `sweeper` command: the only place that prints for the user and chooses exit codes.

- app.py  the typer app and its commands
"""

from sweeper.cli.app import app, main

__all__ = ["app", "main"]
