"""Error kinds. A UserError is shown as one red line and an exit code; anything else is a bug
and keeps its traceback (only cli.py turns errors into exits)."""

from __future__ import annotations


class UserError(Exception):
    """Something the user can fix: bad input, an unreachable host, a busy GPU."""

    exit_code = 2


class ConfigError(UserError):
    """A config file is wrong; the message names the file, the line and the key path."""

    def __init__(self, file: str, path: str, message: str, line: int | None = None):
        self.file, self.path, self.line, self.detail = file, path, line, message
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {path or '<top>'}: {message}")


class InfraError(Exception):
    """A fault of the machinery (SSH drop, host busy), not of the config: the trial is retried."""
