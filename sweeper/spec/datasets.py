"""Prompt sources beyond random ids: dataset files (ShareGPT JSON, JSONL of prompts or chat
messages) and synthetic lengths drawn from a distribution. Pure: files in, typed records out.

A dataset prompt is sent verbatim (the user message of a chat request, or a completion's prompt),
never rewritten. Sampling is seeded: every config of a study gets the same prompts in the same order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

import numpy as np

from sweeper.errors import UserError

FORMATS = ("sharegpt", "jsonl")
HUMAN_ROLES = ("human", "user")
ASSISTANT_ROLES = ("gpt", "assistant", "chatgpt", "bard", "bing", "model")


class DatasetError(UserError):
    """A dataset file that cannot be read: the message names the file and the record."""


@dataclass(frozen=True)
class PromptRecord:
    """One request's prompt: text (a completion prompt, or the user turn of a chat) or chat
    messages, and the output length to ask for (None: the workload's output_len)."""

    text: str | None = None
    messages: tuple[dict, ...] | None = None
    output_len: int | None = None


def guess_format(path: Path) -> str:
    """'sharegpt' for a JSON array, 'jsonl' for one JSON object per line."""
    with path.open("rb") as f:
        head = f.read(4096).lstrip()
    return "sharegpt" if head.startswith(b"[") else "jsonl"


def load_dataset(path: Path, fmt: str | None = None,
                 count_tokens: Callable[[str], int] | None = None) -> list[PromptRecord]:
    """Every usable record of a dataset file. `count_tokens` measures a ShareGPT reply (its length
    is the output length asked for); without it, words are counted (about one token each).
    Errors name the record: a JSONL file's line (`file:LINE:`), a ShareGPT array's record counted
    from 1; a format given that the content does not look like is said beside the error."""
    if not path.is_file():
        raise DatasetError(f"{path}: dataset file not found")
    given, fmt = fmt, fmt or guess_format(path)
    if fmt not in FORMATS:
        raise DatasetError(f"{path}: unknown dataset format {fmt!r} (expected {' or '.join(FORMATS)})")
    counter = count_tokens or (lambda text: len(text.split()))
    try:
        records = _load_sharegpt(path, counter) if fmt == "sharegpt" else _load_jsonl(path)
    except DatasetError as exc:
        if given and (guess := guess_format(path)) != given:
            raise DatasetError(f"{exc} (read as {given}, the format given; the content looks like {guess})") from None
        raise
    if not records:
        raise DatasetError(f"{path}: no usable record")
    return records


def _load_sharegpt(path: Path, count_tokens: Callable[[str], int]) -> list[PromptRecord]:
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(data, list):
        raise DatasetError(f"{path}: a ShareGPT file is a JSON array of conversations")
    records = []
    for index, item in enumerate(data):
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list):
            raise DatasetError(f"{path}: record {index + 1} of the array (from 1): expected {{\"conversations\": [...]}}")
        if record := _first_exchange(path, index, turns, count_tokens):
            records.append(record)
    return records


def _first_exchange(path: Path, index: int, turns: list, count_tokens) -> PromptRecord | None:
    """The first human turn and the reply after it; None for a conversation without both
    (ShareGPT has many: they are skipped, as bench_serving does)."""
    for position, turn in enumerate(turns):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise DatasetError(f"{path}: record {index + 1} of the array (from 1): turn {position + 1}: "
                               "expected {\"from\": ..., \"value\": \"...\"}")
    for position, turn in enumerate(turns[:-1]):
        reply = turns[position + 1]
        if turn.get("from") in HUMAN_ROLES and reply.get("from") in ASSISTANT_ROLES and turn["value"].strip():
            return PromptRecord(text=turn["value"], output_len=max(1, count_tokens(reply["value"])))
    return None


def _load_jsonl(path: Path) -> list[PromptRecord]:
    records = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{number}: not valid JSON: {exc.msg}") from None
        records.append(_jsonl_record(path, number, item))
    return records


def _jsonl_record(path: Path, number: int, item: Any) -> PromptRecord:
    where = f"{path}:{number}"
    if not isinstance(item, dict):
        raise DatasetError(f"{where}: expected an object with \"prompt\" or \"messages\"")
    output_len = item.get("output_len")
    if output_len is not None and (not isinstance(output_len, int) or isinstance(output_len, bool) or output_len < 1):
        raise DatasetError(f"{where}: output_len must be a whole number >= 1, got {output_len!r}")
    if isinstance(item.get("prompt"), str):
        return PromptRecord(text=item["prompt"], output_len=output_len)
    messages = item.get("messages")
    if isinstance(messages, list) and messages and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages):
        return PromptRecord(messages=tuple(messages), output_len=output_len)
    raise DatasetError(f"{where}: expected \"prompt\": \"...\" or \"messages\": [{{\"role\": ..., \"content\": ...}}]")


def sample_records(records: Sequence[PromptRecord], n: int, seed: int, start: int = 0) -> list[PromptRecord]:
    """n records in a seeded order, from position `start` of it: shuffles of the dataset one
    after another (a record comes again only after every other one has come)."""
    order: list[int] = []
    rng = np.random.Generator(np.random.PCG64(seed))
    while len(order) < start + n:
        order += rng.permutation(len(records)).tolist()
    return [records[i] for i in order[start:start + n]]


@dataclass(frozen=True)
class LengthDistribution:
    """Token lengths, guidellm-style: fixed, uniform in [min, max], or normal / lognormal with a
    mean and standard deviation (of the lengths themselves), clipped to [min, max]. A lognormal
    may give `sigma` (of the lengths' logarithm) instead of std; its mean is still `mean`."""

    kind: Literal["fixed", "uniform", "normal", "lognormal"] = "fixed"
    mean: float = 128
    std: float = 0
    min: int = 1
    max: int | None = None
    sigma: float | None = None


def draw_lengths(dist: LengthDistribution, n: int, seed: int) -> list[int]:
    """n seeded lengths from the distribution, each a whole number in [min, max]."""
    rng = np.random.Generator(np.random.PCG64(seed))
    high = dist.max if dist.max is not None else np.inf
    if dist.kind == "fixed":
        values = np.full(n, dist.mean)
    elif dist.kind == "uniform":
        values = rng.integers(dist.min, int(high) + 1, size=n) if np.isfinite(high) else np.full(n, dist.mean)
    elif dist.kind == "normal":
        values = rng.normal(dist.mean, dist.std, size=n)
    else:  # lognormal with the given mean and std of the lengths (not of their logarithm)
        sigma2 = dist.sigma ** 2 if dist.sigma is not None else np.log(1 + (dist.std / dist.mean) ** 2)
        values = rng.lognormal(np.log(dist.mean) - sigma2 / 2, np.sqrt(sigma2), size=n)
    return [int(v) for v in np.clip(np.rint(values), dist.min, high)]
