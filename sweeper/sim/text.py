"""Token texts the simulated model emits: one word per token, each with a leading space.

Greedy output is a pure function of the prompt and the TP size: like real numerics, a different
TP size reduces in a different order, so at a few near-tied positions (TIE_RATE of them) the
greedy pick flips and the continuation from there differs. Configs with the same TP size answer
identically. Garbage configs (FP4 experts read as FP8) emit character soup that depends on the
config, as broken numerics would. Prompt-token logprobs follow the same rule: a fixed value per
(prompt, position), moved by at most NUMERICS_LOGPROB_JITTER by the TP size; garbage configs
give unrelated values.
"""

from __future__ import annotations

import hashlib
import random
from typing import Sequence

VOCAB = tuple(
    "the of and to in a is that for it as was with be by on not he this are or his from at which "
    "but have an they you were their one all we can her has there been if more when will would who "
    "so no model server token expert layer kernel batch step memory graph cache tensor parallel "
    "time fast slow value result first second next each other new only over such after also".split()
)
_SOUP = "ÃÂ¤ð¿½�#@$%&*!?<>|~^ĠĊ▁"
_FRAGMENTS = ("ĠĠ", "<unk>", "??", "ÃÂ", "\\x00", "##", "▁▁", "�")


def prompt_key(prompt: str | Sequence[int]) -> bytes:
    """Stable identity of a prompt: text by its words, token ids by their values."""
    if isinstance(prompt, str):
        material = "text:" + " ".join(prompt.split())
    else:
        material = "ids:" + ",".join(str(int(token)) for token in prompt)
    return hashlib.sha256(material.encode()).digest()


def prompt_length(prompt: str | Sequence[int]) -> int:
    """Input tokens: whitespace-split words of a string, or the number of token ids."""
    return len(prompt.split()) if isinstance(prompt, str) else len(prompt)


def _hash_int(*parts: bytes) -> int:
    return int.from_bytes(hashlib.sha256(b"|".join(parts)).digest()[:8], "big")


# Share of greedy positions whose top two logits are so close that the reduction order (TP size)
# decides between them.
TIE_RATE = 0.04
NUMERICS_LOGPROB_JITTER = 0.03  # nats, prompt-token logprob change across TP sizes


def _is_tie(key: bytes, index: int) -> bool:
    return _hash_int(key, b"tie", str(index).encode()) % 10_000 < TIE_RATE * 10_000


def greedy_token(key: bytes, index: int, numerics: int = 0) -> str:
    """Token `index` of the greedy (temperature 0) continuation of the prompt `key`, computed with
    numerics `numerics` (the TP size; 0: the canonical pick at every tie)."""
    return GreedyStream(key, numerics)(index)


class GreedyStream:
    """index -> greedy token text, remembering where the continuation branched (O(1) per token
    when asked in order, as the scheduler does)."""

    def __init__(self, key: bytes, numerics: int = 0) -> None:
        self._key, self._numerics = key, numerics
        self._branch, self._next = key, 0  # the branch key in force before position _next

    def _picks_alternative(self, position: int) -> bool:
        return bool(self._numerics and _is_tie(self._key, position) and _hash_int(
            self._key, b"pick", str(position).encode(), str(self._numerics).encode()) % 2)

    def __call__(self, index: int) -> str:
        if index < self._next - 1:
            self._branch, self._next = self._key, 0  # asked out of order: recompute from the start
        while self._next <= index:
            if self._picks_alternative(self._next):
                self._branch = hashlib.sha256(self._branch + b"|alt|" + str(self._next).encode()).digest()
            self._next += 1
        return " " + VOCAB[_hash_int(self._branch, str(index).encode()) % len(VOCAB)]


def token_logprob(key: bytes, index: int, numerics: int = 0) -> float:
    """Logprob of token `index` of a text (a prompt token, or a generated token under `key`)."""
    base = -0.05 - (_hash_int(key, b"lp", str(index).encode()) % 6000) / 1000.0
    jitter = (_hash_int(key, b"lpj", str(index).encode(), str(numerics).encode()) % 2001 - 1000) / 1000.0
    return round(min(base + jitter * NUMERICS_LOGPROB_JITTER, 0.0), 4)


def garbage_logprob(seed: bytes, key: bytes, index: int) -> float:
    """What misread weights assign to a token: unrelated to the healthy model's value."""
    return round(-0.5 - (_hash_int(seed, key, b"glp", str(index).encode()) % 14_000) / 1000.0, 4)


def prompt_tokens(prompt: str | Sequence[int]) -> list[str]:
    """The prompt as tokens: its words with a leading space, or token ids as text."""
    if isinstance(prompt, str):
        return [(" " if i else "") + word for i, word in enumerate(prompt.split())]
    return [f"<{int(token)}>" for token in prompt]


def sampled_token(rng: random.Random) -> str:
    return " " + rng.choice(VOCAB)


def config_seed(config_repr: str) -> bytes:
    return hashlib.sha256(config_repr.encode()).digest()


def garbage_token(seed: bytes, key: bytes, index: int) -> str:
    """Nonsense token: character soup or a repeated fragment, never whitespace inside."""
    value = _hash_int(seed, key, str(index).encode())
    if value % 3 == 0:
        return " " + _FRAGMENTS[(value >> 8) % len(_FRAGMENTS)] * (1 + (value >> 16) % 3)
    length = 1 + (value >> 8) % 6
    return " " + "".join(_SOUP[(value >> (16 + 4 * i)) % len(_SOUP)] for i in range(length))
