"""The engine installed on a host, read over the Host protocol: its version and the flags its
`--help` lists. The study caches these per version; `sweeper doctor` reads them without a study."""

from __future__ import annotations

import logging
import shlex
from typing import Sequence

from sweeper.engines.adapter import Engine
from sweeper.engines.flags import flag_problems, parse_help_flags
from sweeper.errors import UserError
from sweeper.hosts.base import CommandResult, Host
from sweeper.spec.hosts import HostSpec
from sweeper.spec.space import Space

log = logging.getLogger(__name__)


def read_version(host: Host, engine: Engine, python: str) -> CommandResult:
    return host.run(engine.version_argv(python), timeout_s=60)


def version_text(result: CommandResult) -> str:
    return result.stdout.strip() or result.stderr.strip()  # llama-server prints to stderr


def read_help_flags(host: Host, engine: Engine, python: str) -> dict[str, list[str] | None]:
    """Every flag the installed engine's --help lists, with its choices; UserError when it cannot be read."""
    result = host.run(engine.help_argv(python), timeout_s=300)
    if result.returncode != 0:
        log.info("%s", result.describe())  # the whole tail for --verbose
        raise UserError(f"cannot read the engine's flags on {host.name}: `{shlex.join(engine.help_argv(python))}` "
                        f"{result.describe_briefly()}")
    return parse_help_flags(result.stdout)


def fixed_argv(space: Space, engine: Engine, python: str) -> tuple[str, ...]:
    """The command line with no parameter set: model and fixed flags (what every trial shares)."""
    return engine.build_launch_spec(space, {}, HostSpec(transport="local"), 1, python).argv


def argv_problems(argv: Sequence[str], engine: Engine, flags: dict[str, list[str] | None]) -> list[str]:
    """What in `argv` the installed engine (its --help `flags`) would refuse."""
    return flag_problems(argv, flags, engine.checks_short_flags, engine.flag_family)
