"""The simulator's prefix cache, as SGLang's radix cache behaves for a prompt stream: a prompt's
leading whole pages that an earlier prompt already computed are hits (their prefill is skipped),
the rest is computed and kept. Unbounded until flushed (the simulated pool never evicts). Pure."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Sequence

PAGE_TOKENS = 16  # tokens per cached page (vLLM's block size; SGLang matches pages too)


@dataclass
class PrefixCache:
    enabled: bool = True
    pages: set[bytes] = field(default_factory=set)
    prompt_tokens: int = 0  # looked up, since start (a counter: /flush_cache keeps it)
    cached_tokens: int = 0  # of them, served from the cache
    since_flush: tuple[int, int] = (0, 0)  # (cached, looked up) since the last flush: the gauge

    def admit(self, tokens: Sequence[str]) -> int:
        """Look a prompt up and keep its pages: how many of its tokens were cached."""
        hits, digest, matching = 0, hashlib.sha256(), self.enabled
        whole = len(tokens) - len(tokens) % PAGE_TOKENS
        for start in range(0, whole, PAGE_TOKENS):
            digest.update("\x1f".join(tokens[start:start + PAGE_TOKENS]).encode() + b"\x1e")
            key = digest.copy().digest()
            if matching and key in self.pages:
                hits += PAGE_TOKENS
            else:
                matching = False
                if self.enabled:
                    self.pages.add(key)
        self.prompt_tokens += len(tokens)
        self.cached_tokens += hits
        self.since_flush = (self.since_flush[0] + hits, self.since_flush[1] + len(tokens))
        return hits

    def flush(self) -> None:
        self.pages.clear()
        self.since_flush = (0, 0)

    @property
    def hit_rate(self) -> float:
        hits, looked_up = self.since_flush
        return hits / looked_up if looked_up else 0.0
