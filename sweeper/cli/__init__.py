"""The `sweeper` command: the only place that prints for the user and chooses exit codes.

- app.py       the typer app: registers every command group (and, for now, ablate, validate, load, profile)
- common.py    consoles, shared options, UserError -> exit code, SIGTERM/SIGHUP -> Ctrl-C
- progress.py  a sweep's progress for people, and how a run of trials ends
- sweep.py     sweep, worker, resume
- results.py   leaderboard, report, show, best
- sim.py       sim best
"""

from sweeper.cli.app import app, main

__all__ = ["app", "main"]
