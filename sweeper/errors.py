"""Error kinds. A UserError is shown as one red line and an exit code; anything else is a bug
and keeps its traceback (only cli.py turns errors into exits)."""

from __future__ import annotations


class UserError(Exception):
    """Something the user can fix: bad input, an unreachable host, a busy GPU."""

    exit_code = 2


class NothingFeasible(UserError):
    """A run ended without a config that could be ranked: a result, not a usage error."""

    exit_code = 1


class ConfigError(UserError):
    """A config file is wrong; the message names the file, the line and the key path. One error
    can carry the file's other problems (`others`): each is one more line of the message."""

    def __init__(self, file: str, path: str, message: str, line: int | None = None,
                 others: tuple["ConfigError", ...] = ()):
        self.file, self.path, self.line, self.detail, self.others = file, path, line, message, tuple(others)
        super().__init__("\n".join([self.first_line, *(o.first_line for o in self.others)]))

    @property
    def first_line(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.path or '<top>'}: {self.detail}"

    @classmethod
    def all_of(cls, errors: list["ConfigError"]) -> "ConfigError":
        """One error reporting every problem found, in the order given."""
        first, *rest = errors
        return cls(first.file, first.path, first.detail, first.line, tuple(rest))


def did_you_mean(word: str, known) -> str:
    """' (did you mean 'x'?)' when `word` is close to one of `known` (difflib), else ''."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(k) for k in known], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def import_optional(module: str, extra: str, what: str):
    """An optional dependency, or a UserError saying which extra brings it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise UserError(f"{what} needs the {module!r} package: pip install 'sweeper[{extra}]'") from None


class InfraError(Exception):
    """A fault of the machinery (SSH drop, host busy), not of the config: the trial is retried."""


class PortClash(InfraError):
    """The server found one of its ports taken (its HTTP port or an internal one): a fault of the
    host, not of the config. `port` is the --port it was launched on, which the retry avoids."""

    def __init__(self, message: str, port: int):
        super().__init__(message)
        self.port = port
