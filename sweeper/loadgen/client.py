"""Async client for OpenAI-style /v1/completions: closed-loop streaming load, one-shot calls.

Timing follows SGLang bench_serving: a request starts when it is sent, its TTFT ends at the first
chunk carrying non-empty text, and every later non-empty chunk is one inter-token step.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from sweeper.loadgen.sse import SseDataDecoder

ERROR_BODY_CHARS = 200


class LoadgenError(Exception):
    """A completion call that gave no usable answer; status is None when no HTTP reply came."""

    def __init__(self, message: str, status: int | None = None, body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


@dataclass
class RequestSample:
    """What one streamed request did, in time.perf_counter() seconds."""

    ok: bool
    error: str
    start: float
    ttft: float
    chunk_times: list[float]
    chunk_tokens: list[int]
    end: float
    prompt_tokens: int
    output_tokens: int
    streamed_tokens: int
    usage_reported: bool
    requested_output_tokens: int

    @property
    def latency(self) -> float:
        return self.end - self.start


@dataclass
class CompletionResult:
    text: str
    completion_tokens: int  # from the server's usage; -1 when the server reported none
    raw: dict


@dataclass
class _StreamTally:
    """Accumulates the chunks of one completion stream."""

    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str = ""
    _held_tokens: int = 0  # tokens of empty-text chunks not yet attributed
    _cumulative: int = 0  # last per-chunk cumulative completion_tokens seen

    def add(self, event: dict, now: float) -> None:
        if event.get("error") or event.get("object") == "error":
            detail = json.dumps(event.get("error", event))
            self.error = f"error in stream: {detail[:ERROR_BODY_CHARS]}"
            return
        usage = event.get("usage") or {}
        choices = event.get("choices") or []
        if choices:
            self._add_choice(choices[0], usage, now)
        if isinstance(usage.get("completion_tokens"), int):
            self.completion_tokens = usage["completion_tokens"]
        if isinstance(usage.get("prompt_tokens"), int):
            self.prompt_tokens = usage["prompt_tokens"]

    def _add_choice(self, choice: dict, usage: dict, now: float) -> None:
        tokens = self._tokens_in_event(choice, usage)
        if not choice.get("text"):
            # SGLang emits empty-text chunks while the detokenizer holds back an incomplete
            # character; those tokens arrive with the next non-empty chunk.
            self._held_tokens += tokens
            return
        self.chunk_times.append(now)
        self.chunk_tokens.append(max(tokens + self._held_tokens, 1))
        self._held_tokens = 0

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
        return 1


def build_completion_payload(
    model: str, prompt: str | list[int], max_tokens: int, *, stream: bool, extra_body: dict | None
) -> dict[str, Any]:
    """Request body: greedy; streamed load requests also ignore EOS so they run to max_tokens."""
    payload: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    if stream:
        payload |= {"ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    return payload | (extra_body or {})


def build_completions_url(base_url: str) -> str:
    return base_url.rstrip("/") + "/v1/completions"


def new_session() -> aiohttp.ClientSession:
    # limit=0: aiohttp's default pool of 100 (and any smaller cap) would silently bound concurrency.
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, limit_per_host=0))


def _connection_cap(session: aiohttp.ClientSession) -> int | None:
    """The most connections the session may open to one host; None when unbounded."""
    connector = session.connector
    if connector is None:
        return None
    caps = [cap for cap in (connector.limit, connector.limit_per_host) if cap]  # 0 means no cap
    return min(caps) if caps else None


async def run_closed_loop(
    base_url: str,
    model: str,
    prompts: list[list[int]],
    output_len: int,
    concurrency: int,
    *,
    timeout_s: float = 300.0,
    extra_body: dict | None = None,
    session: aiohttp.ClientSession | None = None,
) -> tuple[list[RequestSample], float, float]:
    """Send every prompt with exactly `concurrency` requests in flight until the prompts run out.

    Returns (samples in prompt order, wall start, wall end) in perf_counter seconds. A failed
    request becomes a sample with ok=False; nothing a server does makes this raise.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if session is not None and (cap := _connection_cap(session)) is not None and cap < concurrency:
        raise ValueError(
            f"session connector allows {cap} connections, below concurrency {concurrency}"
        )
    url = build_completions_url(base_url)
    samples: list[RequestSample | None] = [None] * len(prompts)
    queue = iter(enumerate(prompts))  # shared by the workers: each takes the next prompt when free

    async def worker(client: aiohttp.ClientSession) -> None:
        for index, prompt in queue:
            payload = build_completion_payload(
                model, prompt, output_len, stream=True, extra_body=extra_body
            )
            samples[index] = await _send_streaming(
                client, url, payload, len(prompt), output_len, timeout_s
            )

    client = session or new_session()
    try:
        wall_start = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(min(concurrency, len(prompts)))))
        wall_end = time.perf_counter()
    finally:
        if session is None:
            await client.close()
    return [s for s in samples if s is not None], wall_start, wall_end


def run_level(
    base_url: str,
    model: str,
    prompts: list[list[int]],
    output_len: int,
    concurrency: int,
    *,
    timeout_s: float = 300.0,
    extra_body: dict | None = None,
) -> tuple[list[RequestSample], float, float]:
    """Blocking run_closed_loop for callers without an event loop (it makes its own session)."""
    return asyncio.run(
        run_closed_loop(
            base_url,
            model,
            prompts,
            output_len,
            concurrency,
            timeout_s=timeout_s,
            extra_body=extra_body,
        )
    )


async def _send_streaming(
    session: aiohttp.ClientSession,
    url: str,
    payload: dict,
    n_prompt_ids: int,
    output_len: int,
    timeout_s: float,
) -> RequestSample:
    tally = _StreamTally()
    start = time.perf_counter()
    try:
        error = await _read_stream(session, url, payload, timeout_s, tally)
    except TimeoutError:
        error = f"timeout after {timeout_s:g} s"
    except Exception as exc:  # a bad server must cost one sample, never the whole level
        error = f"{type(exc).__name__}: {exc}"[:ERROR_BODY_CHARS]
    end = time.perf_counter()
    streamed = sum(tally.chunk_tokens)
    return RequestSample(
        ok=not error,
        error=error,
        start=start,
        ttft=tally.chunk_times[0] - start if tally.chunk_times else math.nan,
        chunk_times=tally.chunk_times,
        chunk_tokens=tally.chunk_tokens,
        end=end,
        prompt_tokens=tally.prompt_tokens if tally.prompt_tokens is not None else n_prompt_ids,
        output_tokens=tally.completion_tokens if tally.completion_tokens is not None else streamed,
        streamed_tokens=streamed,
        usage_reported=tally.completion_tokens is not None,
        requested_output_tokens=output_len,
    )


async def _read_stream(
    session: aiohttp.ClientSession, url: str, payload: dict, timeout_s: float, tally: _StreamTally
) -> str:
    """Feed the response's events into tally; return an error text, or "" on success."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with session.post(url, json=payload, timeout=timeout) as response:
        if response.status != 200:
            body = await response.text(errors="replace")
            return f"HTTP {response.status}: {body[:ERROR_BODY_CHARS]}"
        decoder = SseDataDecoder()
        async for data in response.content.iter_any():
            now = time.perf_counter()
            for payload_text in decoder.feed(data):
                if payload_text == "[DONE]":
                    return tally.error
                tally.add(json.loads(payload_text), now)
                if tally.error:
                    return tally.error
        for payload_text in decoder.flush():
            if payload_text != "[DONE]":
                tally.add(json.loads(payload_text), time.perf_counter())
    return tally.error


async def complete_once(
    base_url: str,
    model: str,
    prompt: str | list[int],
    max_tokens: int,
    timeout_s: float = 60.0,
    *,
    extra_body: dict | None = None,
    session: aiohttp.ClientSession | None = None,
) -> CompletionResult:
    """One greedy, non-streamed completion; raises LoadgenError unless it returns usable JSON."""
    url = build_completions_url(base_url)
    payload = build_completion_payload(
        model, prompt, max_tokens, stream=False, extra_body=extra_body
    )
    client = session or new_session()
    try:
        async with client.post(
            url, json=payload, timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as response:
            body = await response.text(errors="replace")
            status = response.status
    except TimeoutError as exc:
        raise LoadgenError(f"no reply from {url} within {timeout_s:g} s") from exc
    except aiohttp.ClientError as exc:
        raise LoadgenError(f"request to {url} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        if session is None:
            await client.close()
    if status != 200:
        raise LoadgenError(f"HTTP {status} from {url}: {body[:ERROR_BODY_CHARS]}", status, body)
    return _parse_completion(body, status, url)


def _parse_completion(body: str, status: int, url: str) -> CompletionResult:
    try:
        raw = json.loads(body)
        text = raw["choices"][0]["text"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise LoadgenError(
            f"unusable completion from {url}: {type(exc).__name__}: {body[:ERROR_BODY_CHARS]}",
            status,
            body,
        ) from exc
    usage = raw.get("usage") or {}
    tokens = usage.get("completion_tokens")
    return CompletionResult(
        text=text if isinstance(text, str) else str(text),
        completion_tokens=tokens if isinstance(tokens, int) else -1,
        raw=raw,
    )


def complete(
    base_url: str,
    model: str,
    prompt: str | list[int],
    max_tokens: int,
    timeout_s: float = 60.0,
    *,
    extra_body: dict | None = None,
) -> CompletionResult:
    """Blocking complete_once."""
    return asyncio.run(
        complete_once(base_url, model, prompt, max_tokens, timeout_s, extra_body=extra_body)
    )
