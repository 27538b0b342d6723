"""A load level's identity and its names, once. A level is a closed-loop concurrency (an int, C)
or an open-loop request rate (a Rate: requests per modelled second, `workload.request_rates`).
Every name a level has is made here: the study's stored key, the metric prefix (`c4_`, `r2.5_`),
the objective's name (`output_throughput@c4`, `@r2.5`), the samples file, the words in messages.

Rate is a float subclass so a level still orders, compares and scales like its number (the
ladder's linear bound, `level <= objective_level`); a study has one kind of level, so Rate(2.0)
and C=2 never meet in one dict."""

from __future__ import annotations

import re
import zlib
from typing import Any, Iterable, Mapping, Union


class Rate(float):
    """An open-loop level: requests per (modelled) second."""

    def __repr__(self) -> str:
        return f"Rate({format_number(self)})"

    def __str__(self) -> str:
        return format_number(self)


Level = Union[int, Rate]


def format_number(value: float) -> str:
    """The shortest text that reads back as the same number: 4, 2.5, 0.25."""
    value = float(value)
    if value.is_integer():
        return str(int(value))
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def is_rate(level: Any) -> bool:
    return isinstance(level, Rate)


def level_label(level: Level) -> str:
    """The metric prefix and samples-file stem: `c4` (concurrency 4) or `r2.5` (2.5 req/s)."""
    return f"r{format_number(level)}" if is_rate(level) else f"c{int(level)}"


def level_key(level: Level) -> str:
    """The key of a level in a trial's stored `levels`: "4" for C=4 (as always), "r2.5" for a rate."""
    return level_label(level) if is_rate(level) else str(int(level))


def parse_level_key(key: str) -> Level:
    """A stored key back as its level."""
    return Rate(float(key[1:])) if key.startswith("r") else int(key)


def metric_column(level: Level, suffix: str) -> str:
    """A level's column in the leaderboard and CSV: `c4_output_tok_s`, `r2.5_output_tok_s`."""
    return f"{level_label(level)}_{suffix}"


def goal_name(metric: str, level: Level) -> str:
    """An objective's name in the study: `output_throughput@c16`, `output_throughput@r8`."""
    return f"{metric}@{level_label(level)}"


def describe_level(level: Level) -> str:
    """A level in a sentence: 'concurrency 4', 'rate 2.5 req/s'."""
    return f"rate {format_number(level)} req/s" if is_rate(level) else f"concurrency {int(level)}"


def short_level(level: Level) -> str:
    """A level in a table header or progress line: 'C=4', 'rate=2.5'."""
    return f"rate={format_number(level)}" if is_rate(level) else f"C={int(level)}"


def level_seed(level: Level) -> int:
    """An int the level adds to the workload seed (its prompts): C for a concurrency, a hash of
    the label below 10,000 for a rate (the ladder's warm-up seeds start at seed + 10,000)."""
    return zlib.crc32(level_label(level).encode()) % 10_000 if is_rate(level) else int(level)


def workload_levels(concurrency: Iterable[int], request_rates: Iterable[float] | None) -> list[Level]:
    """A workload's ladder: its rates when it has any (open loop), else its concurrencies."""
    rates = list(request_rates or [])
    return [Rate(r) for r in rates] if rates else [int(c) for c in concurrency]


def stored_workload_levels(workload: Mapping[str, Any]) -> list[Level]:
    """The ladder of a stored (dumped) workload mapping, as a study keeps it."""
    return workload_levels(workload.get("concurrency") or [], workload.get("request_rates"))


def as_level_of(levels: Iterable[Level], value: Any) -> Level | None:
    """`value` (a number or a label such as 'r2.5'/'c4') as one of `levels`, or None if it is
    none of them."""
    text = str(value).strip()
    try:
        number = float(text[1:]) if text[:1] in ("r", "c") else float(text)
    except ValueError:
        return None
    for level in levels:
        if float(level) == number and (text[:1] != "r" or is_rate(level)) and (text[:1] != "c" or not is_rate(level)):
            return level
    return None


_LEVEL_COLUMN = re.compile(r"^(c\d+|r\d[0-9.e+-]*)_")


def is_level_column(name: str) -> bool:
    """Whether a leaderboard column is a level's metric (metric_column's names)."""
    return bool(_LEVEL_COLUMN.match(name))
