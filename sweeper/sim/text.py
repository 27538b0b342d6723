"""Token texts the simulated model emits: one word per token, each with a leading space.

Greedy output is a pure function of the prompt, so every correctly working config answers a
prompt with the same text; garbage configs (FP4 experts read as FP8) emit character soup that
depends on the config, as broken numerics would.
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


def greedy_token(key: bytes, index: int) -> str:
    """Token `index` of the greedy (temperature 0) continuation of the prompt `key`."""
    return " " + VOCAB[_hash_int(key, str(index).encode()) % len(VOCAB)]


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
