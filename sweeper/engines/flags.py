"""The installed engine's own flags, read from its `--help`, so a removed flag or a missing choice
costs one second before launch instead of a model load."""

from __future__ import annotations

import re
from typing import Mapping, Sequence

# Flags that vanished or were replaced between releases (../shared/reference/engines.md).
REPLACEMENTS = {
    "--cuda-graph-max-bs": "--cuda-graph-max-bs-decode / --cuda-graph-max-bs-prefill (removed in SGLang 0.5.20)",
    "--disable-cuda-graph": "--cuda-graph-backend-decode disabled (deprecated from SGLang 0.5.16)",
    "--enable-dp-attention": "--attn-dp-size (deprecated in SGLang 0.5.23)",
    "--mlock": "-lm/--load-mode mlock (llama.cpp's llama-server)",
}

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
                  short: bool = False) -> list[str]:
    """What in `argv` the installed engine would refuse: unknown flags (with the replacement when
    one is known) and values outside a flag's choices. With `short`, single-dash flags (`-t`) are
    checked too (for engines whose argv[0] is the engine itself, not `python -m ...`)."""
    problems = []
    for index, item in enumerate(argv):
        if not (item.startswith("--") or (short and index > 0 and _is_short_flag(item))):
            continue
        flag, _, inline = item.partition("=")
        if flag not in known:
            hint = f"; use {REPLACEMENTS[flag]}" if flag in REPLACEMENTS else ""
            problems.append(f"{flag} is not a flag of the installed engine{hint}")
            continue
        choices = known[flag]
        value = inline or (argv[index + 1] if index + 1 < len(argv) else None)
        if choices and value is not None and value not in choices:
            problems.append(f"{flag} {value}: not one of the installed engine's choices ({', '.join(choices)})")
    return problems


def _is_short_flag(item: str) -> bool:
    return len(item) > 1 and item[0] == "-" and item[1].isalpha()
