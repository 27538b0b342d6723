"""A garbage detector for greedy outputs, used while a study has no reference output yet: a MoE
backend that misreads FP4 weights answers with valid HTTP and nonsense text."""

from __future__ import annotations

import math
from collections import Counter

MIN_WORD_CHARS = 0.6  # letters, digits, spaces and common punctuation, as a share of the text
MAX_TOP_WORD_SHARE = 0.5  # one word repeated over half the output
MIN_CHAR_ENTROPY_BITS = 2.0  # "aaaa..." or "!!!!!"
# Replacement chars, unknown tokens, NULs, and BPE byte markers leaking into text (Ġ space, Ċ newline,
# ▁ SentencePiece space): a sign that token ids were decoded from the wrong weights or vocabulary.
_MARKERS = ("\ufffd", "<unk>", "\x00", "\u0120", "\u010a", "\u2581")


def char_entropy_bits(text: str) -> float:
    counts = Counter(text)
    total = len(text)
    return -sum(n / total * math.log2(n / total) for n in counts.values()) if total else 0.0


def garbage_reasons(text: str) -> list[str]:
    """Why `text` looks like garbage (empty list: it looks like language)."""
    stripped = text.strip()
    if not stripped:
        return ["empty output"]
    reasons = []
    wordlike = sum(ch.isalnum() or ch.isspace() or ch in ".,;:'\"!?()-" for ch in stripped) / len(stripped)
    if wordlike < MIN_WORD_CHARS:
        reasons.append(f"only {wordlike:.0%} of the characters are letters, digits or punctuation")
    if markers := [m for m in _MARKERS if m in text]:
        reasons.append(f"contains {', '.join(repr(m) for m in markers)}")
    words = stripped.split()
    if len(words) >= 8:
        word, count = Counter(words).most_common(1)[0]
        if count / len(words) > MAX_TOP_WORD_SHARE:
            reasons.append(f"{word!r} is {count} of {len(words)} words")
    if len(stripped) >= 16 and char_entropy_bits(stripped) < MIN_CHAR_ENTROPY_BITS:
        reasons.append(f"character entropy {char_entropy_bits(stripped):.1f} bits")
    return reasons
