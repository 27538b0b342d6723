"""The closed-loop streaming client on aiohttp (as sweeper shipped it before http1.py: kept-alive
connections, each body read to its end) and on httpx, for the accuracy and capacity comparisons
only (bench/common.py: --client aiohttp, aiohttp-uvloop, httpx). Same SSE decoder, tally and lag
monitor as sweeper's client: only the HTTP path differs. A request's start is stamped where
bench_serving stamps it, before the library's post; a chunk's time when the library hands it over."""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import AsyncIterator, Callable

from sweeper.loadgen.client import LevelRun, RequestSample
from sweeper.loadgen.endpoints import build_request_body, endpoint_url
from sweeper.loadgen.lag import LoopLagMonitor
from sweeper.loadgen.sse import SseDataDecoder
from sweeper.loadgen.stream import StreamTally

HEADERS = {"Content-Type": "application/json"}
Post = Callable[[str, bytes], "AsyncIterator[tuple[int, bytes]]"]  # yields (status, body bytes)


async def _one(post: Post, url: str, model: str, prompt: list[int], output_len: int) -> RequestSample:
    body = json.dumps(build_request_body("completions", model, prompt, output_len, stream=True)).encode()
    tally = StreamTally()
    decoder = SseDataDecoder()
    error = ""
    start = time.perf_counter()
    try:
        async for status, data in post(url, body):
            if status != 200:
                error = f"HTTP {status}"
                break
            now = time.perf_counter()
            for text in decoder.feed(data):
                if text == "[DONE]":
                    tally.done_at = now
                else:
                    tally.add(json.loads(text), now)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    end = tally.done_at or time.perf_counter()
    streamed = sum(tally.chunk_tokens)
    return RequestSample(
        ok=not error and not tally.error, error=error or tally.error, start=start,
        ttft=tally.chunk_times[0] - start if tally.chunk_times else math.nan,
        chunk_times=tally.chunk_times, chunk_tokens=tally.chunk_tokens, end=end,
        prompt_tokens=tally.prompt_tokens or len(prompt),
        output_tokens=tally.completion_tokens if tally.completion_tokens is not None else streamed,
        streamed_tokens=streamed, usage_reported=tally.completion_tokens is not None,
        requested_output_tokens=output_len)


async def _closed_loop(post: Post, base_url: str, model: str, prompts: list[list[int]], output_len: int,
                       concurrency: int) -> LevelRun:
    url = endpoint_url(base_url, "completions")
    samples: list[RequestSample | None] = [None] * len(prompts)
    queue = iter(enumerate(prompts))

    async def worker() -> None:
        for index, prompt in queue:
            samples[index] = await _one(post, url, model, prompt, output_len)

    async with LoopLagMonitor() as lag:
        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(prompts)))))
        end = time.perf_counter()
    return LevelRun([s for s in samples if s is not None], start, end, lag.stats())


async def run_closed_loop_aiohttp(base_url: str, model: str, prompts: list[list[int]], output_len: int,
                                  concurrency: int) -> LevelRun:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)  # no cap on concurrency
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        async def post(url: str, body: bytes):
            async with session.post(url, data=body, headers=HEADERS) as response:
                async for data in response.content.iter_any():
                    yield response.status, data

        return await _closed_loop(post, base_url, model, prompts, output_len, concurrency)


async def run_closed_loop_httpx(base_url: str, model: str, prompts: list[list[int]], output_len: int,
                                concurrency: int) -> LevelRun:
    import httpx

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(600.0)) as client:
        async def post(url: str, body: bytes):
            async with client.stream("POST", url, content=body, headers=HEADERS) as response:
                async for data in response.aiter_raw():
                    yield response.status_code, data

        return await _closed_loop(post, base_url, model, prompts, output_len, concurrency)
