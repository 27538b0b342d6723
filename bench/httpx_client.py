"""The closed-loop streaming client again, on httpx instead of aiohttp, for the capacity
comparison only (bench/capacity.py --client httpx). Same SSE decoder, same chunk accounting, same
lag monitor: only the HTTP library differs."""

from __future__ import annotations

import asyncio
import json
import math
import time

import httpx

from sweeper.loadgen.client import LevelRun, RequestSample, _StreamTally
from sweeper.loadgen.endpoints import build_request_body, endpoint_url
from sweeper.loadgen.lag import LoopLagMonitor
from sweeper.loadgen.sse import SseDataDecoder


async def _one(client: httpx.AsyncClient, url: str, model: str, prompt: list[int], output_len: int) -> RequestSample:
    payload = build_request_body("completions", model, prompt, output_len, stream=True)
    tally = _StreamTally()
    start = time.perf_counter()
    error = ""
    try:
        async with client.stream("POST", url, json=payload) as response:
            if response.status_code != 200:
                error = f"HTTP {response.status_code}"
            else:
                decoder = SseDataDecoder()
                async for data in response.aiter_raw():
                    now = time.perf_counter()
                    for text in decoder.feed(data):
                        if text != "[DONE]":
                            tally.add(json.loads(text), now)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    end = time.perf_counter()
    streamed = sum(tally.chunk_tokens)
    return RequestSample(
        ok=not error and not tally.error, error=error or tally.error, start=start,
        ttft=tally.chunk_times[0] - start if tally.chunk_times else math.nan,
        chunk_times=tally.chunk_times, chunk_tokens=tally.chunk_tokens, end=end,
        prompt_tokens=tally.prompt_tokens or len(prompt),
        output_tokens=tally.completion_tokens if tally.completion_tokens is not None else streamed,
        streamed_tokens=streamed, usage_reported=tally.completion_tokens is not None,
        requested_output_tokens=output_len)


async def run_closed_loop_httpx(base_url: str, model: str, prompts: list[list[int]], output_len: int,
                                concurrency: int) -> LevelRun:
    url = endpoint_url(base_url, "completions")
    samples: list[RequestSample | None] = [None] * len(prompts)
    queue = iter(enumerate(prompts))
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(600.0)) as client:
        async def worker() -> None:
            for index, prompt in queue:
                samples[index] = await _one(client, url, model, prompt, output_len)

        async with LoopLagMonitor() as lag:
            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(min(concurrency, len(prompts)))))
            end = time.perf_counter()
    return LevelRun([s for s in samples if s is not None], start, end, lag.stats())
