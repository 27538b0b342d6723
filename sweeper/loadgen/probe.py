"""What the level loop asks the server itself, around the load: empty its prefix cache before a
level, read its cache counters around the measured runs (the hit rate), and count the prompts'
tokens (a local tokenizer file, or the engine's own /tokenize). What an engine offers is data of
its adapter (EngineInfo.prefix_cache, EngineInfo.tokenize), never probed by trying.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Sequence

from sweeper.loadgen.endpoints import Prompt, TokenizeApi, build_tokenize_body, parse_token_count, request_parts
from sweeper.loadgen.http1 import HttpError
from sweeper.loadgen.oneshot import get, post


@dataclass(frozen=True)
class PrefixCacheApi:
    """An engine's prefix-cache controls: the POST path that empties it, and the /metrics names
    of its counters (prompt tokens served from the cache, prompt tokens looked up), or of a
    hit-rate gauge where it has no counters. None: it has no such thing."""

    flush_path: str | None = None
    hits_counter: str | None = None
    queries_counter: str | None = None
    hit_rate_gauge: str | None = None
    metrics_path: str = "/metrics"
    flush_needs: str = ""  # what the server needs before it honours the flush, where it says no otherwise

    @property
    def reads_metrics(self) -> bool:
        return bool(self.hits_counter and self.queries_counter) or bool(self.hit_rate_gauge)


def parse_metric_totals(text: str) -> dict[str, float]:
    """Prometheus text exposition as {metric name: value summed over its label sets}; a counter's
    `_total` sample is keyed by its bare name too (prometheus_client adds the suffix)."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if not match:
            continue  # comments (# HELP, # TYPE), blank lines
        name, value = match.group(1), float(match.group(2))
        if math.isnan(value):
            continue
        names = (name, name.removesuffix("_total")) if name.endswith("_total") else (name,)
        for key in names:
            totals[key] = totals.get(key, 0.0) + value
    return totals


# name, optional {labels}, value, optional timestamp
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{.*\})?\s+([-+]?(?:[0-9.]+(?:[eE][-+]?[0-9]+)?|Inf|NaN))(?:\s+-?[0-9]+)?$")


def cache_fields(api: PrefixCacheApi, before: dict[str, float] | None, after: dict[str, float] | None
                 ) -> dict[str, Any]:
    """A level's prefix-cache record from the counters read before and after its measured runs:
    hit tokens / looked-up tokens in between, else the gauge as read after; None where unknown."""
    fields: dict[str, Any] = {"prefix_cache_hit_rate": None, "prefix_cache_hit_tokens": None,
                              "prefix_cache_query_tokens": None}
    if after is None:
        return fields
    if before is not None and api.hits_counter in after and api.queries_counter in after:
        hits = after[api.hits_counter] - before.get(api.hits_counter, 0.0)
        queries = after[api.queries_counter] - before.get(api.queries_counter, 0.0)
        fields.update(prefix_cache_hit_tokens=hits, prefix_cache_query_tokens=queries,
                      prefix_cache_hit_rate=hits / queries if queries > 0 else None)
    elif api.hit_rate_gauge and api.hit_rate_gauge in after:
        fields["prefix_cache_hit_rate"] = after[api.hit_rate_gauge]
    return fields


def flush_refused_note(api: PrefixCacheApi) -> str:
    """Why levels of a server that refused its cache flush (cache_flushed: false) did not start empty."""
    needs = f"; it honours the flush only with {api.flush_needs}" if api.flush_needs else ""
    return (f"the server refused POST {api.flush_path}, so its levels do not start with an empty prefix "
            f"cache (cache_flushed: false){needs}")


@dataclass(frozen=True)
class LevelProbe:
    """The server's side of a level: cache flush and counters, prompt token counts (a local
    `tokenizers.Tokenizer` first, else the engine's /tokenize)."""

    base_url: str
    model: str = ""
    cache: PrefixCacheApi = PrefixCacheApi()
    tokenize: TokenizeApi | None = None
    tokenizer: Any | None = None
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))

    def flush(self) -> bool | None:
        """Empty the server's prefix cache: True when it said so (2xx), False when it refused
        (vLLM without VLLM_SERVER_DEV_MODE=1 answers 404), None where the engine has no flush."""
        if not self.cache.flush_path:
            return None

        try:
            status, _ = post(self.base_url + self.cache.flush_path, None, self.timeout_s)
        except (HttpError, ValueError):
            return False
        return 200 <= status < 300

    def cache_counters(self) -> dict[str, float] | None:
        """The server's /metrics totals, or None where it exposes none (SGLang without
        --enable-metrics) or the engine declares no cache metric."""
        if not self.cache.reads_metrics:
            return None

        try:
            status, text = get(self.base_url + self.cache.metrics_path, self.timeout_s)
        except (HttpError, ValueError):
            return None
        return parse_metric_totals(text) if status == 200 else None

    @property
    def counts_tokens(self) -> bool:
        return self.tokenizer is not None or self.tokenize is not None

    @property
    def counted_by(self) -> str | None:
        if self.tokenizer is not None:
            return "tokenizer"
        return f"engine {self.tokenize.path}" if self.tokenize is not None else None

    def count_prompt_tokens(self, prompts: Sequence[Prompt]) -> list[int] | None:
        """Each prompt's tokens without a chat template (token ids: their number; messages: their
        contents' sum); None when neither a tokenizer nor the engine's /tokenize can count them or
        the engine refused."""
        if not self.counts_tokens:
            return None
        counts = []
        try:
            for prompt in prompts:
                content, _ = request_parts(prompt)
                if isinstance(content, list) and not (content and isinstance(content[0], dict)):
                    counts.append(len(content))
                elif isinstance(content, list):
                    counts.append(sum(self._count_text(m["content"]) for m in content))
                else:
                    counts.append(self._count_text(content))
        except (ValueError, OSError):
            return None
        return counts

    def _count_text(self, text: str) -> int:
        if self.tokenizer is not None:
            return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

        assert self.tokenize is not None
        try:
            status, body = post(self.base_url + self.tokenize.path,
                                build_tokenize_body(self.tokenize, self.model, text), self.timeout_s)
        except HttpError as exc:
            raise ValueError(str(exc)) from None
        if status != 200:
            raise ValueError(f"HTTP {status} from {self.tokenize.path}")
        return parse_token_count(json.loads(body))


def token_count_fields(probe: LevelProbe | None, counts: list[int] | None) -> dict[str, Any]:
    """A run's prompt token counts as its record holds them."""
    if probe is None or not probe.counts_tokens:
        return {}
    mean = sum(counts) / len(counts) if counts else math.nan
    return {"prompt_tokens_counted": sum(counts) if counts is not None else None,
            "mean_prompt_tokens_counted": None if counts is None or not counts else mean,
            "prompt_tokens_counted_by": probe.counted_by if counts is not None else None}
