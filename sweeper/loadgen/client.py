"""Async streaming client for OpenAI-style /v1/completions and /v1/chat/completions.

Closed loop (exactly C requests in flight until the prompts run out), open loop (requests sent on
a fixed or Poisson schedule), and one-shot calls. Timing follows SGLang bench_serving: a request
starts when it is sent, its TTFT ends at the first chunk carrying non-empty text, and every later
non-empty chunk is one inter-token step. Every level run also measures the client's own event-loop
lag (lag.py), so a level the client could not keep up with is marked invalid, not believed.

aiohttp over httpx: on one core it ingests about 2x the streamed tokens per second
(bench/README.md, "Capacity").

Connections are kept alive: each response is read to its end, and its connection goes back to a
pool that serves the next request (a new TCP connection per request sat inside every TTFT and cost
a third of the client's capacity). A server that closes a kept connection just as a request is
sent into it (llama-server closes after every streamed response while advertising keep-alive)
gets that request once more on a fresh connection; the sample counts the reconnect. A dead server
gives failed samples, never a hang: a kept connection whose server died is closed under the pool
(through the SSH port forward too, hosts/forward.py), and no request is retried twice.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any, Coroutine, TypeVar

import aiohttp

from sweeper.loadgen.endpoints import Api, RequestDialect, build_request_body, choice_text, endpoint_url
from sweeper.loadgen.lag import LagStats, LoopLagMonitor
from sweeper.loadgen.sse import SseDataDecoder

ERROR_BODY_CHARS = 200
T = TypeVar("T")
_decode_json = json.JSONDecoder().decode  # json.loads minus its per-call argument checks
JSON_HEADERS = {"Content-Type": "application/json"}
DRAIN_S = 1.0  # after [DONE], how long the body's end may take before the connection is dropped


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
    # chunk_tokens were spread from the final usage count (a coalescing server, RequestDialect)
    tokens_estimated: bool = False
    reconnects: int = 0  # sent again on a fresh connection: the server had closed the kept one

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
    coalesced: bool = False  # events of one read are one chunk; counts come from the final usage
    tokens_estimated: bool = False
    done_at: float | None = None  # when [DONE] arrived (the body's end is read after it)
    _held_tokens: int = 0  # tokens of empty-text chunks not yet attributed
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
                self._held_tokens = 0
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
            return
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
    ignore_eos: bool = True  # send ignore_eos (servers with a strict schema refuse it)
    coalesced_stream: bool = False  # see RequestDialect.coalesced_stream


def fit_to_dialect(options: StreamOptions, dialect: RequestDialect) -> StreamOptions:
    """The options limited to what the server accepts: its endpoint, no field it refuses (asking
    for min_tokens or per-chunk usage is dropped where it has none), its way of streaming."""
    return replace(options, api=dialect.api, ignore_eos=dialect.ignore_eos,
                   min_tokens=options.min_tokens and dialect.min_tokens,
                   continuous_usage=options.continuous_usage and dialect.continuous_usage,
                   coalesced_stream=dialect.coalesced_stream)


@dataclass
class LevelRun:
    """One measured run: samples in prompt order, its wall span (perf_counter s), the loop lag."""

    samples: list[RequestSample]
    start: float
    end: float
    lag: LagStats
    ran: dict = field(default_factory=dict)  # run on the host: its python, version, client module

    @property
    def duration_s(self) -> float:
        return self.end - self.start


STALLED = "stalled:"  # how the error of a request that got no byte for stall_timeout_s begins


def is_stalled(sample: RequestSample) -> bool:
    return bool(sample.error) and sample.error.startswith(STALLED)


def new_session(keep_alive: bool = True) -> aiohttp.ClientSession:
    """A session whose pool never bounds concurrency (limit=0: aiohttp's default of 100, or any
    smaller cap, would silently); it holds at most as many connections as requests were in flight.
    keep_alive=False opens a new connection per request."""
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, force_close=not keep_alive)
    return aiohttp.ClientSession(connector=connector, trace_configs=[_reuse_trace()])


def _reuse_trace() -> aiohttp.TraceConfig:
    """Marks a request's trace context (a SimpleNamespace passed as trace_request_ctx) `reused`
    when aiohttp sends it over a pooled connection."""
    async def on_reuse(session: object, context: SimpleNamespace, params: object) -> None:
        if isinstance(context.trace_request_ctx, SimpleNamespace):
            context.trace_request_ctx.reused = True

    config = aiohttp.TraceConfig()
    config.on_connection_reuseconn.append(on_reuse)
    return config


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


def run_measured(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, on uvloop's event loop when uvloop is installed (SGLang and vLLM environments
    have it): on one core it spent ~20% less CPU per streamed token at 20,000-25,000 tok/s and
    kept one more level valid (bench/README.md); timing and accuracy were the same."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    run = getattr(uvloop, "run", None)  # uvloop >= 0.18
    return run(coro) if run is not None else asyncio.run(coro)


def event_loop_name() -> str:
    """Which event loop run_measured uses here."""
    try:
        import uvloop
    except ImportError:
        return "asyncio"
    return "uvloop" if hasattr(uvloop, "run") else "asyncio"


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
    return run_measured(
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
        ignore_eos=opts.ignore_eos,
    )
    body = json.dumps(payload).encode()  # before the clock starts: not the server's latency
    start, tally, error, stale = await _attempt(session, url, body, opts)
    reconnects = 0
    if stale:  # once more, on a connection of its own: the pool may hold more the server closed
        reconnects = 1
        async with new_session(keep_alive=False) as fresh:
            start, tally, error, _ = await _attempt(fresh, url, body, opts)
    end = tally.done_at if tally.done_at is not None and not error else time.perf_counter()
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
        tokens_estimated=tally.tokens_estimated,
        reconnects=reconnects,
    )


async def _attempt(
    session: aiohttp.ClientSession, url: str, body: bytes, opts: StreamOptions
) -> tuple[float, _StreamTally, str, bool]:
    """Send once: (start, tally, error text or "", whether it met a kept connection the server
    had closed)."""
    tally = _StreamTally(coalesced=opts.coalesced_stream)
    attempt = SimpleNamespace(reused=False, answered=False)
    start = time.perf_counter()
    try:
        error = await _read_stream(session, url, body, opts, tally, attempt)
        if not error:
            tally.finish()
        return start, tally, error, False
    except aiohttp.ServerTimeoutError:  # sock_read: the only socket timeout set
        return start, tally, f"{STALLED} no data for {opts.stall_timeout_s:g} s", False
    except TimeoutError:
        return start, tally, f"timeout after {opts.timeout_s:g} s", False
    except Exception as exc:  # a bad server must cost one sample, never the whole level
        error = f"{type(exc).__name__}: {exc}"[:ERROR_BODY_CHARS]
        return start, tally, error, _closed_under_us(exc, attempt)


def _closed_under_us(exc: Exception, attempt: SimpleNamespace) -> bool:
    """A kept connection the server had closed before this request reached it: it failed on a
    reused connection with no reply at all (aiohttp's own retry rule, which it applies to
    idempotent methods only). A connection that could not be opened is never this."""
    return (attempt.reused and not attempt.answered
            and isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError))
            and not isinstance(exc, aiohttp.ClientConnectorError))


def _prompt_ids(prompt: str | list[int]) -> int:
    """Input tokens when the server reports none: exact for token ids, 0 (unknown) for text."""
    return len(prompt) if isinstance(prompt, list) else 0


async def _read_stream(
    session: aiohttp.ClientSession, url: str, body: bytes, opts: StreamOptions, tally: _StreamTally,
    attempt: SimpleNamespace,
) -> str:
    """Feed the response's events into tally; return an error text, or "" on success."""
    timeout = aiohttp.ClientTimeout(total=opts.timeout_s, sock_read=opts.stall_timeout_s)
    async with session.post(url, data=body, headers=JSON_HEADERS, timeout=timeout,
                            trace_request_ctx=attempt) as response:
        attempt.answered = True
        if response.status != 200:
            body = await response.text(errors="replace")
            return f"HTTP {response.status}: {body[:ERROR_BODY_CHARS]}"
        decoder = SseDataDecoder()
        async for data in response.content.iter_any():
            now = time.perf_counter()
            for payload_text in decoder.feed(data):
                if payload_text == "[DONE]":
                    tally.done_at = now
                    await _read_to_end(response)
                    return tally.error
                tally.add(_decode_json(payload_text), now)
                if tally.error:
                    return tally.error
        for payload_text in decoder.flush():
            if payload_text != "[DONE]":
                tally.add(json.loads(payload_text), time.perf_counter())
    return tally.error


async def _read_to_end(response: aiohttp.ClientResponse) -> None:
    """Read the body's end (the last chunk of a chunked reply), so the connection goes back to the
    pool; a body that does not end soon after [DONE] costs its connection, not the sample."""
    if response.content.at_eof():
        return
    try:
        await asyncio.wait_for(response.content.read(), DRAIN_S)
    except Exception:
        response.close()


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
        if "meta_info" in raw:  # SGLang /generate
            meta = raw["meta_info"] if isinstance(raw["meta_info"], dict) else {}
            tokens = meta.get("completion_tokens")
            return CompletionResult(str(raw["text"]), tokens if isinstance(tokens, int) else -1, raw)
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
    api: Api = "completions",
) -> CompletionResult:
    """Blocking complete_once."""
    return asyncio.run(
        complete_once(base_url, model, prompt, max_tokens, timeout_s, extra_body=extra_body, api=api)
    )
