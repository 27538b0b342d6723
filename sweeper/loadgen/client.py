"""Async streaming client for OpenAI-style /v1/completions and /v1/chat/completions.

Closed loop (exactly C requests in flight until the prompts run out), open loop (requests sent on
a fixed or Poisson schedule), and one-shot calls. Timing follows SGLang bench_serving: a request
starts when it is sent, its TTFT ends at the first chunk carrying non-empty text, and every later
non-empty chunk is one inter-token step. Every level run also measures the client's own event-loop
lag (lag.py), so a level the client could not keep up with is marked invalid, not believed.

aiohttp over httpx: on one core it ingests about 2x the streamed tokens per second
(bench/README.md, "Capacity").
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from sweeper.loadgen.endpoints import Api, build_request_body, choice_text, endpoint_url
from sweeper.loadgen.lag import LagStats, LoopLagMonitor
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
        if not choice_text(choice):
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
        delta = choice.get("delta")
        if isinstance(delta, dict) and not delta.get("content") and (
            delta.get("role") or delta.get("content") is None
        ):
            return 0  # a chat stream's opening role chunk or closing empty delta carries no token
        return 1


def build_completion_payload(
    model: str, prompt: str | list[int], max_tokens: int, *, stream: bool, extra_body: dict | None
) -> dict[str, Any]:
    """/v1/completions body: greedy; streamed load requests also ignore EOS (endpoints.py)."""
    return build_request_body(
        "completions", model, prompt, max_tokens, stream=stream, extra_body=extra_body
    )


def build_completions_url(base_url: str) -> str:
    return endpoint_url(base_url, "completions")


@dataclass(frozen=True)
class StreamOptions:
    """How each streamed request is sent and read (the same for every request of a level)."""

    api: Api = "completions"
    timeout_s: float = 300.0  # whole request
    stall_timeout_s: float | None = None  # no byte for this long: the request failed as stalled
    extra_body: dict | None = None
    min_tokens: bool = False  # also send min_tokens = max_tokens (SGLang, vLLM)
    continuous_usage: bool = False  # ask for cumulative usage in every chunk


@dataclass
class LevelRun:
    """One measured run: samples in prompt order, its wall span (perf_counter s), the loop lag."""

    samples: list[RequestSample]
    start: float
    end: float
    lag: LagStats

    @property
    def duration_s(self) -> float:
        return self.end - self.start


STALLED = "stalled:"  # how the error of a request that got no byte for stall_timeout_s begins


def is_stalled(sample: RequestSample) -> bool:
    return bool(sample.error) and sample.error.startswith(STALLED)


def new_session() -> aiohttp.ClientSession:
    # limit=0: aiohttp's default pool of 100 (and any smaller cap) would silently bound concurrency.
    # force_close: one connection per request, always (see _read_stream). Without it a response read
    # to its end (e.g. [DONE] and the last chunk in one segment) goes back to the pool, and
    # llama-server, which closes after each streamed response while advertising keep-alive, fails
    # the next request on that connection ("Can not write request body").
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, limit_per_host=0, force_close=True))


def _connection_cap(session: aiohttp.ClientSession) -> int | None:
    """The most connections the session may open to one host; None when unbounded."""
    connector = session.connector
    if connector is None:
        return None
    caps = [cap for cap in (connector.limit, connector.limit_per_host) if cap]  # 0 means no cap
    return min(caps) if caps else None


def _check_session(session: aiohttp.ClientSession | None, concurrency: int) -> None:
    if session is not None and (cap := _connection_cap(session)) is not None and cap < concurrency:
        raise ValueError(
            f"session connector allows {cap} connections, below concurrency {concurrency}"
        )


def _options(options: StreamOptions | None, timeout_s: float, extra_body: dict | None) -> StreamOptions:
    if options is not None:
        return options
    return StreamOptions(timeout_s=timeout_s, extra_body=extra_body)


async def run_closed_loop(
    base_url: str,
    model: str,
    prompts: list[list[int]] | list[str],
    output_len: int,
    concurrency: int,
    *,
    timeout_s: float = 300.0,
    extra_body: dict | None = None,
    session: aiohttp.ClientSession | None = None,
    options: StreamOptions | None = None,
) -> LevelRun:
    """Send every prompt with exactly `concurrency` requests in flight until the prompts run out.

    A failed request becomes a sample with ok=False; nothing a server does makes this raise.
    `options` (when given) replaces timeout_s and extra_body.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    _check_session(session, concurrency)
    opts = _options(options, timeout_s, extra_body)
    url = endpoint_url(base_url, opts.api)
    samples: list[RequestSample | None] = [None] * len(prompts)
    queue = iter(enumerate(prompts))  # shared by the workers: each takes the next prompt when free
    stalled = False  # a stalled request means a hung server: send no more (the level is lost anyway)

    async def worker(client: aiohttp.ClientSession) -> None:
        nonlocal stalled
        for index, prompt in queue:
            if stalled:
                return
            samples[index] = await _send_streaming(client, url, model, prompt, output_len, opts)
            stalled = stalled or is_stalled(samples[index])

    client = session or new_session()
    try:
        async with LoopLagMonitor() as lag:
            wall_start = time.perf_counter()
            await asyncio.gather(*(worker(client) for _ in range(min(concurrency, len(prompts)))))
            wall_end = time.perf_counter()
    finally:
        if session is None:
            await client.close()
    return LevelRun([s for s in samples if s is not None], wall_start, wall_end, lag.stats())


async def run_open_loop(
    base_url: str,
    model: str,
    prompts: list[list[int]] | list[str],
    output_len: int,
    send_offsets_s: list[float],
    *,
    max_concurrency: int | None = None,
    session: aiohttp.ClientSession | None = None,
    options: StreamOptions | None = None,
) -> LevelRun:
    """Send prompt i at wall start + send_offsets_s[i] (workload.arrival_offsets_s builds a fixed
    or Poisson schedule), whatever is still in flight; with max_concurrency, a request due while
    that many are in flight waits for one to finish (as bench_serving's --max-concurrency)."""
    if len(send_offsets_s) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(send_offsets_s)} send times")
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    _check_session(session, max_concurrency or 0)
    opts = options or StreamOptions()
    url = endpoint_url(base_url, opts.api)
    gate = asyncio.Semaphore(max_concurrency) if max_concurrency else None

    async def one(client: aiohttp.ClientSession, prompt, due: float) -> RequestSample:
        await asyncio.sleep(max(due - time.perf_counter(), 0.0))
        if gate is None:
            return await _send_streaming(client, url, model, prompt, output_len, opts)
        async with gate:
            return await _send_streaming(client, url, model, prompt, output_len, opts)

    client = session or new_session()
    try:
        async with LoopLagMonitor() as lag:
            wall_start = time.perf_counter()
            samples = await asyncio.gather(
                *(one(client, p, wall_start + t) for p, t in zip(prompts, send_offsets_s))
            )
            wall_end = time.perf_counter()
    finally:
        if session is None:
            await client.close()
    return LevelRun(list(samples), wall_start, wall_end, lag.stats())


def run_level(
    base_url: str,
    model: str,
    prompts: list[list[int]] | list[str],
    output_len: int,
    concurrency: int,
    *,
    timeout_s: float = 300.0,
    extra_body: dict | None = None,
    options: StreamOptions | None = None,
) -> LevelRun:
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
            options=options,
        )
    )


async def _send_streaming(
    session: aiohttp.ClientSession,
    url: str,
    model: str,
    prompt: str | list[int],
    output_len: int,
    opts: StreamOptions,
) -> RequestSample:
    payload = build_request_body(
        opts.api,
        model,
        prompt,
        output_len,
        stream=True,
        extra_body=opts.extra_body,
        min_tokens=opts.min_tokens,
        continuous_usage=opts.continuous_usage,
    )
    tally = _StreamTally()
    start = time.perf_counter()
    try:
        error = await _read_stream(session, url, payload, opts, tally)
    except aiohttp.ServerTimeoutError:  # sock_read: the only socket timeout set
        error = f"{STALLED} no data for {opts.stall_timeout_s:g} s"
    except TimeoutError:
        error = f"timeout after {opts.timeout_s:g} s"
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
        prompt_tokens=tally.prompt_tokens if tally.prompt_tokens is not None else _prompt_ids(prompt),
        output_tokens=tally.completion_tokens if tally.completion_tokens is not None else streamed,
        streamed_tokens=streamed,
        usage_reported=tally.completion_tokens is not None,
        requested_output_tokens=output_len,
    )


def _prompt_ids(prompt: str | list[int]) -> int:
    """Input tokens when the server reports none: exact for token ids, 0 (unknown) for text."""
    return len(prompt) if isinstance(prompt, list) else 0


async def _read_stream(
    session: aiohttp.ClientSession, url: str, payload: dict, opts: StreamOptions, tally: _StreamTally
) -> str:
    """Feed the response's events into tally; return an error text, or "" on success."""
    timeout = aiohttp.ClientTimeout(total=opts.timeout_s, sock_read=opts.stall_timeout_s)
    async with session.post(url, json=payload, timeout=timeout) as response:
        if response.status != 200:
            body = await response.text(errors="replace")
            return f"HTTP {response.status}: {body[:ERROR_BODY_CHARS]}"
        decoder = SseDataDecoder()
        # Returning at [DONE] leaves the body's end unread, so aiohttp closes the connection and
        # the next request opens a new one (inside its TTFT: ~0.2 ms on loopback). Reusing it is
        # not safe yet: through the SSH port forward, a kept connection whose server died is not
        # closed, and a request sent into it hangs (tests/e2e/test_ssh_sweep.py).
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
    api: Api = "completions",
) -> CompletionResult:
    """One greedy, non-streamed completion; raises LoadgenError unless it returns usable JSON."""
    url = endpoint_url(base_url, api)
    payload = build_request_body(
        api, model, prompt, max_tokens, stream=False, extra_body=extra_body
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
        choice = raw["choices"][0]
        text = choice["message"]["content"] if "message" in choice else choice["text"]
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
