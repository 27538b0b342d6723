"""The closed-loop streaming client on aiohttp, as sweeper shipped it before http1.py (kept-alive
connections, each body read to its end), for the capacity and accuracy comparisons only
(bench/capacity.py --clients aiohttp). Same SSE decoder, tally and lag monitor as sweeper's
client: only the HTTP path differs. The start timestamp is taken where bench_serving takes it,
before session.post()."""

from __future__ import annotations

import asyncio
import json
import math
import time

import aiohttp

from sweeper.loadgen.client import LevelRun, RequestSample, _StreamTally
from sweeper.loadgen.endpoints import build_request_body, endpoint_url
from sweeper.loadgen.lag import LoopLagMonitor
from sweeper.loadgen.sse import SseDataDecoder

HEADERS = {"Content-Type": "application/json"}


async def _one(session: aiohttp.ClientSession, url: str, model: str, prompt: list[int],
               output_len: int) -> RequestSample:
    body = json.dumps(build_request_body("completions", model, prompt, output_len, stream=True)).encode()
    tally = _StreamTally()
    error = ""
    start = time.perf_counter()
    try:
        async with session.post(url, data=body, headers=HEADERS) as response:
            if response.status != 200:
                error = f"HTTP {response.status}"
            else:
                decoder = SseDataDecoder()
                async for data in response.content.iter_any():
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


async def run_closed_loop_aiohttp(base_url: str, model: str, prompts: list[list[int]], output_len: int,
                                  concurrency: int) -> LevelRun:
    url = endpoint_url(base_url, "completions")
    samples: list[RequestSample | None] = [None] * len(prompts)
    queue = iter(enumerate(prompts))
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)  # no cap on concurrency
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        async def worker() -> None:
            for index, prompt in queue:
                samples[index] = await _one(session, url, model, prompt, output_len)

        async with LoopLagMonitor() as lag:
            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(min(concurrency, len(prompts)))))
            end = time.perf_counter()
    return LevelRun([s for s in samples if s is not None], start, end, lag.stats())
