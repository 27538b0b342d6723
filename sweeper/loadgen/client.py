"""Async streaming client for OpenAI-style /v1/completions and /v1/chat/completions.

Closed loop (exactly C requests in flight until the prompts run out), open loop (requests sent on
a fixed or Poisson schedule); one-shot calls are oneshot.py's. Timing follows SGLang bench_serving: a request
starts when it is sent, its TTFT ends at the first chunk carrying non-empty text, and every later
non-empty chunk is one inter-token step. Every level run also measures the client's own event-loop
lag (lag.py), so a level the client could not keep up with is marked invalid, not believed.

HTTP is our own lean HTTP/1.1 client (http1.py): each read of a stream is parsed (stream.py) in the
socket's callback, no coroutine wakes per chunk, and a request's start is the moment its bytes are written
to an open connection. On one core it held every accuracy bound up to ~58,000 streamed tok/s;
aiohttp's TTFT was 0.7 ms late at 20,000 (bench/README.md, "Third pass").

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
from typing import Any, Awaitable, Callable, Coroutine, Iterable, Sized, TypeVar

from sweeper.loadgen.endpoints import Api, Prompt, RequestDialect, build_request_body, endpoint_url, request_parts
from sweeper.loadgen.http1 import HttpError, Pool, RequestTimeout, StaleConnection, Stalled
from sweeper.loadgen.lag import LagStats, LoopLagMonitor
from sweeper.loadgen.stream import ERROR_BODY_CHARS, StreamSink, StreamTally

T = TypeVar("T")
JSON_HEADERS = {"Content-Type": "application/json"}


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
    turnarounds_s: list[float] | None = None  # closed loop: a worker's gaps to each send (from its last end, or the start)
    stopped_at: float | None = None  # closed loop with a stop condition: when it said stop

    @property
    def duration_s(self) -> float:
        return self.end - self.start


# a closed loop's stop condition: (completed samples, wall start, requests sent, settled) -> stop now
Until = Callable[[list[RequestSample], float, int, float], bool]
STALLED = "stalled:"  # how the error of a request that got no byte for stall_timeout_s begins


def is_stalled(sample: RequestSample) -> bool:
    return bool(sample.error) and sample.error.startswith(STALLED)


def _options(options: StreamOptions | None, timeout_s: float, extra_body: dict | None) -> StreamOptions:
    if options is not None:
        return options
    return StreamOptions(timeout_s=timeout_s, extra_body=extra_body)


async def run_closed_loop(
    base_url: str,
    model: str,
    prompts: Iterable[Prompt],
    output_len: int,
    concurrency: int,
    *,
    timeout_s: float = 300.0,
    extra_body: dict | None = None,
    session: Pool | None = None,
    options: StreamOptions | None = None,
    until: Until | None = None,
) -> LevelRun:
    """Send every prompt with exactly `concurrency` requests in flight until the prompts run out
    or `until(completed samples, wall start, requests sent, settled)`, asked after each
    completion, says stop (precision.PrecisionStop); `settled` is the earliest send of a request
    still in flight: every token streamed before it is in the completed samples. The requests in
    flight then finish, and `stopped_at` is when it said stop. `prompts` may be an endless
    iterator when `until` is given.

    A failed request becomes a sample with ok=False; nothing a server does makes this raise.
    `options` (when given) replaces timeout_s and extra_body. Each gap between a request's end
    and the next send of the same worker is the client's own turnaround (`turnarounds_s`), and so
    is the gap from the run's start to a worker's first send.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    opts = _options(options, timeout_s, extra_body)
    url = endpoint_url(base_url, opts.api)
    client = session or Pool()
    workers = min(concurrency, len(prompts)) if isinstance(prompts, Sized) else concurrency
    try:
        if client.keep_alive:
            try:  # the level's clock starts with its connections open, as a long-lived client's are
                await client.open(url, workers, opts.timeout_s)
            except HttpError:
                pass  # each request meets the same failure on its own, as a failed sample
        send = lambda prompt: _send_streaming(client, url, model, prompt, output_len, opts)  # noqa: E731
        return await _ClosedLoop(prompts, until, send).run(workers)
    finally:
        if session is None:
            client.close()


class _ClosedLoop:
    """One closed-loop run's shared state: the prompt queue its workers refill from, what they
    collected, and whether to send more (no, after a stall or once `until` said stop)."""

    def __init__(self, prompts: Iterable[Prompt], until: Until | None,
                 send: Callable[[Prompt], Awaitable[RequestSample]]) -> None:
        self.queue = iter(enumerate(prompts))  # shared by the workers: each takes the next prompt when free
        self.until, self.send = until, send
        self.samples: list[tuple[int, RequestSample]] = []
        self.done: list[RequestSample] = []  # in completion order, for `until`
        self.turnarounds: list[float] = []
        self.stalled = False  # a stalled request means a hung server: send no more (the level is lost anyway)
        self.stopped_at: float | None = None
        self.sent = 0
        self.in_flight: dict[int, float] = {}  # worker -> when it took its prompt
        self.wall_start = 0.0

    async def run(self, workers: int) -> LevelRun:
        """Start `workers` workers under the lag monitor; the run once the last has finished."""
        async with LoopLagMonitor() as lag:
            self.wall_start = time.perf_counter()
            await asyncio.gather(*(self.worker(number) for number in range(workers)))
            wall_end = time.perf_counter()
        ordered = [s for _, s in sorted(self.samples, key=lambda pair: pair[0])]
        return LevelRun(ordered, self.wall_start, wall_end, lag.stats(), turnarounds_s=self.turnarounds,
                        stopped_at=self.stopped_at)

    async def worker(self, number: int) -> None:
        """Refill: send the next prompt whenever the last finished, until none is left or the loop stops.
        Its first send's delay counts as turnaround too: the clock runs from the start and only the
        client acts before that send. Uncounted, a busy machine's 11-13 ms before the first round
        (of a 139-ms level) read as the config's shortfall, 3.59 of 4 in flight (2026-12-07)."""
        last_end = self.wall_start
        for index, prompt in self.queue:
            if self.stalled or self.stopped_at is not None:
                return
            self.sent += 1
            self.in_flight[number] = time.perf_counter()
            sample = await self.send(prompt)
            del self.in_flight[number]
            self.collect(index, sample, last_end)
            last_end = sample.end

    def collect(self, index: int, sample: RequestSample, last_end: float) -> None:
        """Keep a finished request (its worker's turnaround since `last_end`: its previous end, or
        the run's start); then stop after a stall, or when `until` says so."""
        self.samples.append((index, sample))
        self.done.append(sample)
        self.turnarounds.append(max(sample.start - last_end, 0.0))
        self.stalled = self.stalled or is_stalled(sample)
        if self.until is not None and self.stopped_at is None and \
                self.until(self.done, self.wall_start, self.sent,
                           min(self.in_flight.values(), default=time.perf_counter())):
            self.stopped_at = time.perf_counter()


async def run_open_loop(
    base_url: str,
    model: str,
    prompts: list[Prompt],
    output_len: int,
    send_offsets_s: list[float],
    *,
    max_concurrency: int | None = None,
    session: Pool | None = None,
    options: StreamOptions | None = None,
) -> LevelRun:
    """Send prompt i at wall start + send_offsets_s[i] (workload.arrival_offsets_s builds a fixed
    or Poisson schedule), whatever is still in flight; with max_concurrency, a request due while
    that many are in flight waits for one to finish (as bench_serving's --max-concurrency)."""
    if len(send_offsets_s) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(send_offsets_s)} send times")
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    opts = options or StreamOptions()
    url = endpoint_url(base_url, opts.api)
    gate = asyncio.Semaphore(max_concurrency) if max_concurrency else None

    async def one(client: Pool, prompt, due: float) -> RequestSample:
        await asyncio.sleep(max(due - time.perf_counter(), 0.0))
        if gate is None:
            return await _send_streaming(client, url, model, prompt, output_len, opts)
        async with gate:
            return await _send_streaming(client, url, model, prompt, output_len, opts)

    client = session or Pool()
    try:
        async with LoopLagMonitor() as lag:
            wall_start = time.perf_counter()
            samples = await asyncio.gather(
                *(one(client, p, wall_start + t) for p, t in zip(prompts, send_offsets_s))
            )
            wall_end = time.perf_counter()
    finally:
        if session is None:
            client.close()
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
    prompts: list[Prompt],
    output_len: int,
    concurrency: int,
    *,
    timeout_s: float = 300.0,
    extra_body: dict | None = None,
    options: StreamOptions | None = None,
    until: Until | None = None,
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
            until=until,
        )
    )


async def _send_streaming(
    pool: Pool,
    url: str,
    model: str,
    prompt: Prompt,
    output_len: int,
    opts: StreamOptions,
) -> RequestSample:
    content, own_len = request_parts(prompt)
    output_len = own_len or output_len  # a dataset record's or a drawn length
    payload = build_request_body(
        opts.api,
        model,
        content,
        output_len,
        stream=True,
        extra_body=opts.extra_body,
        min_tokens=opts.min_tokens,
        continuous_usage=opts.continuous_usage,
        ignore_eos=opts.ignore_eos,
    )
    body = json.dumps(payload).encode()  # before the clock starts: not the server's latency
    reconnects = 0
    try:
        stream, error = await _attempt(pool, url, body, opts, fresh=False)
    except StaleConnection:  # once more, on a connection of its own: the pool may hold more the server closed
        reconnects = 1
        stream, error = await _attempt(pool, url, body, opts, fresh=True)
    tally = stream.tally
    end = tally.done_at if tally.done_at is not None and not error else time.perf_counter()
    streamed = sum(tally.chunk_tokens)
    return RequestSample(
        ok=not error,
        error=error,
        start=stream.start,
        ttft=tally.chunk_times[0] - stream.start if tally.chunk_times else math.nan,
        chunk_times=tally.chunk_times,
        chunk_tokens=tally.chunk_tokens,
        end=end,
        prompt_tokens=tally.prompt_tokens if tally.prompt_tokens is not None else _prompt_ids(content),
        output_tokens=tally.completion_tokens if tally.completion_tokens is not None else streamed,
        streamed_tokens=streamed,
        usage_reported=tally.completion_tokens is not None,
        requested_output_tokens=output_len,
        tokens_estimated=tally.tokens_estimated,
        reconnects=reconnects,
    )


async def _attempt(pool: Pool, url: str, body: bytes, opts: StreamOptions, fresh: bool) -> tuple[StreamSink, str]:
    """Send once: the stream as read and an error text ("" on success). Raises StaleConnection
    when it met a kept connection the server had closed."""
    stream = StreamSink(StreamTally(coalesced=opts.coalesced_stream))
    try:
        await pool.request("POST", url, body, stream, headers=JSON_HEADERS, timeout_s=opts.timeout_s,
                           stall_s=opts.stall_timeout_s, fresh=fresh)
    except StaleConnection:
        raise  # the caller sends it once more on a fresh connection, which is never stale
    except Stalled:
        return stream, f"{STALLED} no data for {opts.stall_timeout_s:g} s"
    except RequestTimeout:
        return stream, f"timeout after {opts.timeout_s:g} s"
    except Exception as exc:  # a bad server must cost one sample, never the whole level
        return stream, f"{type(exc).__name__}: {exc}"[:ERROR_BODY_CHARS]
    try:
        return stream, stream.outcome()
    except Exception as exc:
        return stream, f"{type(exc).__name__}: {exc}"[:ERROR_BODY_CHARS]


def _prompt_ids(prompt: str | list[int] | list[dict]) -> int:
    """Input tokens when the server reports none: exact for token ids, 0 (unknown) for text."""
    return len(prompt) if isinstance(prompt, list) and not (prompt and isinstance(prompt[0], dict)) else 0


def new_session(keep_alive: bool = True) -> Pool:
    """A connection pool for run_closed_loop/run_open_loop/complete_once to share (never capped);
    keep_alive=False opens a new connection per request."""
    return Pool(keep_alive=keep_alive)
