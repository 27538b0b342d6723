"""A streamed completion's reply, parsed as it arrives: StreamSink takes http1's reads of the
body, SseDataDecoder (sse.py) frames them into `data:` payloads, and StreamTally counts each
event's text and tokens at the instant its read arrived (OpenAI completions and chat chunks, and
SGLang's native /generate events). Shipped to the host with the client (loadgen/onhost.py)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from sweeper.loadgen.endpoints import choice_text
from sweeper.loadgen.http1 import ENOUGH, MORE, STOP
from sweeper.loadgen.sse import SseDataDecoder

ERROR_BODY_CHARS = 200
ERROR_BODY_BYTES = 64 * 1024  # of a non-200 reply's body: enough for its message
_decode_json = json.JSONDecoder().decode  # json.loads minus its per-call argument checks


@dataclass
class StreamTally:
    """Accumulates the chunks of one completion stream."""

    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str = ""
    coalesced: bool = False  # events of one read are one chunk; counts come from the final usage
    tokens_estimated: bool = False
    done_at: float | None = None  # when [DONE] arrived (the body's end is read after it)
    _held_tokens: int = 0  # tokens of empty-text chunks not yet attributed
    # (arrival, tokens) of those empty-text chunks whose count was exact (per-chunk usage or
    # token_ids): tokens that decode to no text (special tokens, a split UTF-8 character) still
    # arrived then, so any left when the stream ends count there (vllm-h200: 52 of 64 tokens)
    _held_events: list = field(default_factory=list)
    _usage_every_chunk: bool = True  # false once a text chunk came without usage: a later one is a total
    _cumulative: int = 0  # last per-chunk cumulative completion_tokens seen
    _text_length: int = 0  # /generate: length of the cumulative text so far

    def add(self, event: dict, now: float) -> None:
        usage = event.get("usage")
        choices = event.get("choices")
        if choices and not usage and not self.coalesced and not event.get("error") and event.get("object") != "error":
            choice = choices[0]
            text = choice.get("text")
            if text and text.__class__ is str and "token_ids" not in choice:
                # Nearly every event: a completion chunk of text without usage, one token. The
                # general path below gives the same; this one runs per token, so it is short.
                self.chunk_times.append(now)
                self.chunk_tokens.append(1 + self._held_tokens)
                self._held_tokens, self._usage_every_chunk = 0, False
                if self._held_events:
                    self._held_events.clear()
                return
        if event.get("error") or event.get("object") == "error":
            detail = json.dumps(event.get("error", event))
            self.error = f"error in stream: {detail[:ERROR_BODY_CHARS]}"
            return
        if "meta_info" in event:
            self._add_native(event, now)
            return
        usage = usage or {}
        if choices:
            self._add_choice(choices[0], usage, now)
        if isinstance(usage.get("completion_tokens"), int):
            self.completion_tokens = usage["completion_tokens"]
        if isinstance(usage.get("prompt_tokens"), int):
            self.prompt_tokens = usage["prompt_tokens"]

    def _add_native(self, event: dict, now: float) -> None:
        """An SGLang /generate event: the text so far (cumulative, SGLang's default and what
        bench_serving assumes) and meta_info's cumulative completion_tokens. An event that adds
        no text holds its tokens for the next that does, as an empty OpenAI chunk does."""
        meta = event.get("meta_info") or {}
        total = meta.get("completion_tokens")
        if isinstance(total, int):
            tokens, self._cumulative = max(total - self._cumulative, 0), max(total, self._cumulative)
            self.completion_tokens = total
        else:
            tokens = 1
        if isinstance(meta.get("prompt_tokens"), int):
            self.prompt_tokens = meta["prompt_tokens"]
        text = event.get("text")
        length = len(text) if isinstance(text, str) else 0
        if length <= self._text_length:
            self._held_tokens += tokens
            return
        self._text_length = length
        self.chunk_times.append(now)
        self.chunk_tokens.append(max(tokens + self._held_tokens, 1))
        self._held_tokens = 0

    def _add_choice(self, choice: dict, usage: dict, now: float) -> None:
        tokens = self._tokens_in_event(choice, usage)
        if not choice_text(choice):
            # SGLang emits empty-text chunks while the detokenizer holds back an incomplete
            # character; those tokens arrive with the next non-empty chunk.
            self._held_tokens += tokens
            exact = ((isinstance(usage.get("completion_tokens"), int) and self._usage_every_chunk)
                     or isinstance(choice.get("token_ids"), list))
            if tokens and exact:
                self._held_events.append((now, tokens))
            return
        self._held_events.clear()
        if not isinstance(usage.get("completion_tokens"), int):
            self._usage_every_chunk = False
        if self.coalesced and self.chunk_times and self.chunk_times[-1] == now:
            self.chunk_tokens[-1] += max(tokens + self._held_tokens, 1)  # same read: same instant
        else:
            self.chunk_times.append(now)
            self.chunk_tokens.append(max(tokens + self._held_tokens, 1))
        self._held_tokens = 0

    def finish(self) -> None:
        """For a coalescing server: tokens the usage counts beyond the events seen (held back by
        its detokenizer, or several per event) are spread evenly over the chunks, so ITL spreads a
        chunk's gap over its tokens. Fewer usage tokens than events stays a mismatch."""
        self._flush_held_events()
        counted = sum(self.chunk_tokens)
        if not (self.coalesced and self.chunk_tokens and self.completion_tokens is not None):
            return
        surplus = self.completion_tokens - counted
        if surplus <= 0:
            return
        n = len(self.chunk_tokens)
        base, extra = divmod(surplus, n)
        self.chunk_tokens = [t + base + (1 if i >= n - extra else 0) for i, t in enumerate(self.chunk_tokens)]
        self.tokens_estimated = True

    def _flush_held_events(self) -> None:
        """Empty-text chunks after the last text, each counted (exactly, from its usage delta) at
        its own arrival, as vllm bench serve counts every chunk. Tokens held without an exact
        count stay uncounted: a usage total they would explain is still a mismatch."""
        if self._held_events and sum(t for _, t in self._held_events) == self._held_tokens:
            for at, tokens in self._held_events:
                self.chunk_times.append(at)
                self.chunk_tokens.append(tokens)
            self._held_tokens = 0
        self._held_events.clear()

    def _tokens_in_event(self, choice: dict, usage: dict) -> int:
        # Per-chunk usage (continuous_usage_stats) or token_ids say exactly how many tokens a
        # chunk carries when the server coalesces several steps; without them, one per event.
        cumulative = usage.get("completion_tokens")
        if isinstance(cumulative, int):
            tokens, self._cumulative = cumulative - self._cumulative, cumulative
            return max(tokens, 0)
        token_ids = choice.get("token_ids")
        if isinstance(token_ids, list):
            return len(token_ids)
        delta = choice.get("delta")
        if isinstance(delta, dict) and not delta.get("content") and (
            delta.get("role") or delta.get("content") is None
        ):
            return 0  # a chat stream's opening role chunk or closing empty delta carries no token
        return 1


class StreamSink:
    """One streamed response into a tally. http1 calls body() from the socket's read callback, so
    each read's events are decoded right there: no coroutine wakes per chunk."""

    __slots__ = ("tally", "decoder", "start", "status", "done", "_error_parts", "_error_size")

    def __init__(self, tally: StreamTally) -> None:
        self.tally = tally
        self.decoder = SseDataDecoder()
        self.start = time.perf_counter()  # until sent() says when the request was written
        self.status = 0
        self.done = False
        self._error_parts: list[bytes] = []
        self._error_size = 0

    def sent(self, at: float) -> None:
        self.start = at

    def head(self, status: int, headers: dict[str, str]) -> None:
        self.status = status

    def body(self, data: bytes, now: float) -> int:
        if self.status != 200:  # an error reply: keep its message, not an endless body
            self._error_parts.append(data)
            self._error_size += len(data)
            return STOP if self._error_size >= ERROR_BODY_BYTES else MORE
        if self.done:
            return ENOUGH
        tally = self.tally
        for payload_text in self.decoder.feed(data):
            if payload_text == "[DONE]":
                tally.done_at, self.done = now, True
                return ENOUGH
            tally.add(_decode_json(payload_text), now)
            if tally.error:
                return STOP
        return MORE

    def outcome(self) -> str:
        """After the response: an error text, or "" when the stream was good."""
        if self.status != 200:
            text = b"".join(self._error_parts).decode("utf-8", "replace")
            return f"HTTP {self.status}: {text[:ERROR_BODY_CHARS]}"
        if not self.done and not self.tally.error:
            for payload_text in self.decoder.flush():
                if payload_text != "[DONE]":
                    self.tally.add(json.loads(payload_text), time.perf_counter())
        if not self.tally.error:
            self.tally.finish()
        return self.tally.error
