"""Synthetic prompts as token ids: seeded, so every trial of a study sends the same load."""

from __future__ import annotations

import numpy as np

# Low ids are special tokens (BOS, EOS, pad, byte fallbacks) in common vocabularies;
# sending them can end generation early or change the prompt's meaning.
MIN_TOKEN_ID = 100


def build_prompt_token_ids(
    n_requests: int, input_len: int, seed: int, vocab_size: int = 32000
) -> list[list[int]]:
    """Return n_requests distinct prompts of exactly input_len ids in [MIN_TOKEN_ID, vocab_size).

    Request i depends only on (seed, input_len, i), so a longer list starts with the shorter one.
    """
    if n_requests < 0:
        raise ValueError(f"n_requests must be >= 0, got {n_requests}")
    if input_len < 1:
        raise ValueError(f"input_len must be >= 1, got {input_len}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    span = vocab_size - MIN_TOKEN_ID
    if span < 1:
        raise ValueError(f"vocab_size must be > {MIN_TOKEN_ID}, got {vocab_size}")
    if span**input_len < n_requests:
        raise ValueError(
            f"cannot build {n_requests} distinct prompts of {input_len} ids from {span} ids"
        )
    # The raw PCG64 stream is stable across numpy releases; Generator.integers is not promised.
    # The modulo bias over a 2**64 range is negligible.
    bits = np.random.PCG64(seed)
    seen: set[tuple[int, ...]] = set()
    prompts: list[list[int]] = []
    for _ in range(n_requests):
        while True:
            ids = (bits.random_raw(input_len) % np.uint64(span) + np.uint64(MIN_TOKEN_ID)).tolist()
            key = tuple(ids)
            if key not in seen:  # a repeated prompt would be served from the prefix cache
                break
        seen.add(key)
        prompts.append(ids)
    return prompts
