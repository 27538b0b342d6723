"""The installed engine's own flags, read from its `--help`, so a removed flag or a missing choice
costs one second before launch instead of a model load."""

from __future__ import annotations

import re
from typing import Mapping, Sequence

from sweeper.engines.versions import hint_for

_FLAG = re.compile(r"(?<![\w-])(--[A-Za-z0-9][A-Za-z0-9_.-]*)(?:[ =]\{([^}]*)\})?")
# A short alias listed before another flag, as in llama.cpp's `-t,    --threads N` or `-nocb, --no-cont-batching`
_SHORT_FLAG = re.compile(r"(?<![\w-])(-[A-Za-z][A-Za-z0-9_-]*)(?=,\s*-)")


def parse_help_flags(help_text: str) -> dict[str, list[str] | None]:
    """Every long flag an argparse `--help` shows, with its choices when it lists them."""
    flags: dict[str, list[str] | None] = {}
    for flag, choices in _FLAG.findall(help_text):
        flag = flag.rstrip(".")
        if choices:
            flags[flag] = [c.strip() for c in choices.split(",")]
        else:
            flags.setdefault(flag, None)
    for flag in _SHORT_FLAG.findall(help_text):
        flags.setdefault(flag, None)
    return flags


def flag_problems(argv: Sequence[str], known: Mapping[str, list[str] | None],
                  short: bool = False, engine: str | None = None) -> list[str]:
    """What in `argv` the installed engine would refuse: unknown flags and values outside a flag's
    choices, each with its replacement or the release it came in when versions.py knows it. With
    `short`, single-dash flags (`-t`) are checked too (for engines whose argv[0] is the engine
    itself, not `python -m ...`)."""
    problems = []
    for index, item in enumerate(argv):
        if not (item.startswith("--") or (short and index > 0 and _is_short_flag(item))):
            continue
        flag, _, inline = item.partition("=")
        if flag not in known:
            problems.append(f"{flag} is not a flag of the installed engine{hint_for(flag, engine)}")
            continue
        choices = known[flag]
        value = inline or (argv[index + 1] if index + 1 < len(argv) else None)
        if choices and value is not None and value not in choices:
            problems.append(f"{flag} {value}: not one of the installed engine's choices ({', '.join(choices)})"
                            f"{hint_for(flag, engine, value)}")
    return problems


def _is_short_flag(item: str) -> bool:
    return len(item) > 1 and item[0] == "-" and item[1].isalpha()
