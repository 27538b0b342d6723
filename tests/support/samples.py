"""RequestSample builders for the pure metrics tests: a request's chunks at given times."""

from __future__ import annotations

import gzip
import json
import math

from sweeper.loadgen.client import RequestSample
from tests.support.paths import FIXTURE_DIR


def make_sample(
    start,
    chunk_times,
    *,
    chunk_tokens=None,
    end=None,
    output_tokens=None,
    usage_reported=True,
    requested=None,
    prompt_tokens=10,
):
    chunk_tokens = chunk_tokens or [1] * len(chunk_times)
    streamed = sum(chunk_tokens)
    output_tokens = streamed if output_tokens is None else output_tokens
    return RequestSample(
        ok=True,
        error="",
        start=start,
        ttft=chunk_times[0] - start if chunk_times else math.nan,
        chunk_times=list(chunk_times),
        chunk_tokens=list(chunk_tokens),
        end=chunk_times[-1] if end is None else end,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        streamed_tokens=streamed,
        usage_reported=usage_reported,
        requested_output_tokens=output_tokens if requested is None else requested,
    )


def make_failure(error="HTTP 500: boom", start=0.0, end=0.1):
    return RequestSample(
        ok=False,
        error=error,
        start=start,
        ttft=math.nan,
        chunk_times=[],
        chunk_tokens=[],
        end=end,
        prompt_tokens=10,
        output_tokens=0,
        streamed_tokens=0,
        usage_reported=False,
        requested_output_tokens=5,
    )


def two_requests():
    """A: TTFT 0.2 s, then chunks 0.2 s apart, the last carrying 2 tokens (5 tokens, 1.0 s).
    B: TTFT 0.1 s, chunks 0.4 s apart, ends 0.98 s (3 tokens)."""
    a = make_sample(0.0, [0.2, 0.4, 0.6, 1.0], chunk_tokens=[1, 1, 1, 2])
    b = make_sample(0.0, [0.1, 0.5, 0.9], end=0.98)
    return [a, b]


def recorded_vllm_samples(name: str) -> list[RequestSample]:
    """A level's samples as the client recorded them against vLLM 0.24 on the H200
    (tests/fixtures/vllm/samples/NAME.json.gz)."""
    path = FIXTURE_DIR / "vllm" / "samples" / f"{name}.json.gz"
    return [RequestSample(**s) for s in json.loads(gzip.decompress(path.read_bytes()))]
