"""Synthetic prompts as token ids: seeded, so every trial of a study sends the same load."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from sweeper.errors import import_optional

# Low ids are special tokens (BOS, EOS, pad, byte fallbacks) in common vocabularies;
# sending them can end generation early or change the prompt's meaning.
MIN_TOKEN_ID = 100


def _lengths(n_requests: int, input_len: int | Sequence[int]) -> list[int]:
    """One input length per request: the same for all, or each request's own (drawn lengths)."""
    lengths = [input_len] * n_requests if isinstance(input_len, int) else list(input_len)
    if len(lengths) != n_requests:
        raise ValueError(f"{n_requests} requests but {len(lengths)} lengths")
    if lengths and min(lengths) < 1:
        raise ValueError(f"input_len must be >= 1, got {min(lengths)}")
    return lengths


def build_prompt_token_ids(
    n_requests: int, input_len: int | Sequence[int], seed: int, vocab_size: int = 32000
) -> list[list[int]]:
    """Return n_requests distinct prompts of exactly input_len ids in [MIN_TOKEN_ID, vocab_size)
    (input_len: one length, or each request's).

    Request i depends only on (seed, the lengths, i), so a longer list starts with the shorter one.
    """
    if n_requests < 0:
        raise ValueError(f"n_requests must be >= 0, got {n_requests}")
    lengths = _lengths(n_requests, input_len)
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    span = vocab_size - MIN_TOKEN_ID
    if span < 1:
        raise ValueError(f"vocab_size must be > {MIN_TOKEN_ID}, got {vocab_size}")
    if lengths and span ** min(lengths) < n_requests:
        raise ValueError(
            f"cannot build {n_requests} distinct prompts of {min(lengths)} ids from {span} ids"
        )
    # The raw PCG64 stream is stable across numpy releases; Generator.integers is not promised.
    # The modulo bias over a 2**64 range is negligible.
    bits = np.random.PCG64(seed)
    seen: set[tuple[int, ...]] = set()
    prompts: list[list[int]] = []
    for length in lengths:
        while True:
            ids = (bits.random_raw(length) % np.uint64(span) + np.uint64(MIN_TOKEN_ID)).tolist()
            key = tuple(ids)
            if key not in seen:  # a repeated prompt would be served from the prefix cache
                break
        seen.add(key)
        prompts.append(ids)
    return prompts


# Short common words: most BPE vocabularies hold " word" as one token, so a prompt of n words is
# about n tokens even without the model's tokenizer.
_WORDS = (
    "the of and to in is was for on are with as by at be this from or have an they which one "
    "you were all we when there can more if no out so said what up its about into than them "
    "only other new some could time these two may then first any like now my such make over our "
    "even most after also made many before must through back years where much your way well down "
    "should because each just those people how too little state good very world still own see "
    "men work long here between both life being under never day same another know while last "
    "might great old year off come since against go came right used take three"
).split()


def build_prompt_texts(
    n_requests: int, input_len: int | Sequence[int], seed: int, tokenizer: Any | None = None
) -> list[str]:
    """n_requests distinct seeded text prompts of about input_len tokens.

    Without a tokenizer: input_len common words (one token each in most vocabularies, so close,
    not exact). With a `tokenizers.Tokenizer` (tokenizer_from_file): trimmed or extended until it
    encodes, without special tokens, to exactly input_len ids; best effort, since a few strings
    re-encode differently after decoding (exact_lengths tells). Chat templates add their own
    tokens on the server: the input length that counts is the one its usage reports.
    """
    if n_requests < 0:
        raise ValueError(f"need n_requests >= 0, got {n_requests}")
    bits = np.random.PCG64(seed)
    texts = []
    for i, length in enumerate(_lengths(n_requests, input_len)):
        picks = (bits.random_raw(length) % np.uint64(len(_WORDS))).tolist()
        # A leading request number keeps prompts distinct (no prefix-cache hits between them).
        words = [str(i)] + [_WORDS[k] for k in picks[1:]]
        text = " ".join(words)
        if tokenizer is not None:
            text = _fit_to_length(text, length, tokenizer, bits)
        texts.append(text)
    return texts


def _fit_to_length(text: str, input_len: int, tokenizer: Any, bits: np.random.PCG64) -> str:
    for _ in range(8):
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        if len(ids) == input_len:
            return text
        if len(ids) > input_len:
            text = tokenizer.decode(ids[:input_len])
        else:
            extra = (bits.random_raw(input_len - len(ids)) % np.uint64(len(_WORDS))).tolist()
            text = text + " " + " ".join(_WORDS[k] for k in extra)
    return text


def build_shared_prefixes(groups: int, tokens: int, seed: int, *, as_text: bool, vocab_size: int = 32000,
                          tokenizer: Any | None = None) -> list[str] | list[list[int]]:
    """`groups` distinct seeded system prompts of `tokens` tokens (text, or token ids): the same
    for every level and every config of a study, so a prefix cache can hold them."""
    seed = seed + 7_000_000  # a stream of their own, apart from the requests'
    if as_text:
        return build_prompt_texts(groups, tokens, seed, tokenizer=tokenizer)  # distinct: each starts with its number
    return build_prompt_token_ids(groups, tokens, seed, vocab_size)


def pick_groups(n_requests: int, groups: int, seed: int) -> list[int]:
    """Which shared prefix each request starts with: seeded, uniform over the groups."""
    return np.random.Generator(np.random.PCG64(seed + 8_000_000)).integers(0, groups, n_requests).tolist()


def exact_lengths(texts: list[str], tokenizer: Any) -> list[int]:
    """How many ids each text encodes to (without special tokens)."""
    return [len(tokenizer.encode(t, add_special_tokens=False).ids) for t in texts]


def tokenizer_from_file(path: str) -> Any:
    """A `tokenizers.Tokenizer` from a tokenizer.json file or a folder holding one (optional
    dependency: `pip install tokenizers`)."""
    from pathlib import Path

    Tokenizer = import_optional("tokenizers", "tokenizer", "a tokenizer file").Tokenizer

    file = Path(path)
    return Tokenizer.from_file(str(file / "tokenizer.json" if file.is_dir() else file))


def arrival_offsets_s(n_requests: int, rate: float, *, poisson: bool, seed: int) -> list[float]:
    """Send times (seconds after the start) for an open loop at `rate` requests per second:
    evenly spaced, or a Poisson process (exponential gaps) drawn from `seed`. The first request
    goes at 0."""
    if rate <= 0 or not np.isfinite(rate):
        raise ValueError(f"rate must be a positive number, got {rate}")
    if n_requests <= 0:
        return []
    if not poisson:
        return [i / rate for i in range(n_requests)]
    gaps = np.random.Generator(np.random.PCG64(seed)).exponential(1.0 / rate, n_requests - 1)
    return [0.0] + np.cumsum(gaps).tolist()
