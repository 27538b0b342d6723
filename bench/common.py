"""Shared by the benchmark scripts: start the reference server, run a level with our client (or
the aiohttp or httpx variant), compare with the truth, describe the machine."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sweeper.loadgen.client import StreamOptions, new_session, run_closed_loop  # noqa: E402
from sweeper.loadgen.metrics import summarize_level  # noqa: E402
from sweeper.loadgen.workload import build_prompt_token_ids  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port} after {timeout_s} s")


@contextmanager
def refserver(ttft_ms: float, gap_ms: float, cpu: int | None = None, max_batch: int | None = None
              ) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, str(ROOT / "bench" / "refserver.py"), "--port", str(port),
            "--ttft-ms", str(ttft_ms), "--gap-ms", str(gap_ms)]
    if max_batch is not None:
        argv += ["--max-batch", str(max_batch)]
    if cpu is not None:
        argv += ["--cpu", str(cpu)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    try:
        wait_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def server_lateness(url: str) -> dict:
    with urllib.request.urlopen(url + "/stats", timeout=10) as reply:
        return json.loads(reply.read())


@dataclass(frozen=True)
class Truth:
    ttft_ms: float
    gap_ms: float
    output_len: int
    concurrency: int

    @property
    def output_tok_s(self) -> float:
        request_s = (self.ttft_ms + (self.output_len - 1) * self.gap_ms) / 1000
        return self.concurrency * self.output_len / request_s


def actual_truth(server: dict) -> dict:
    """What the reference server actually did, from its own write timestamps (/stats)."""
    return {"output_tok_s": server["tokens"] / server["span_s"] if server["span_s"] else float("nan"),
            "ttft_ms": server["ttft_median_ms"], "gap_ms": server["gap_median_ms"]}


def errors_against(m: dict, truth: dict) -> dict:
    """Errors of a measured level against a truth dict (output_tok_s, ttft_ms, gap_ms)."""
    return {
        "tok_s_err_pct": 100 * (m["output_throughput"] - truth["output_tok_s"]) / truth["output_tok_s"],
        "ttft_err_ms": m["median_ttft_ms"] - truth["ttft_ms"],
        "itl_err_ms": m["median_itl_ms"] - truth["gap_ms"],
    }


def within_bounds(errors: dict, tok_pct: float = 1.0, ms: float = 0.5) -> bool:
    return (abs(errors["tok_s_err_pct"]) <= tok_pct and abs(errors["ttft_err_ms"]) <= ms
            and abs(errors["itl_err_ms"]) <= ms)


CLIENTS = ("sweeper", "sweeper-close", "sweeper-uvloop", "aiohttp", "aiohttp-uvloop", "httpx")


def run_ours(url: str, concurrency: int, n_requests: int, output_len: int, client: str = "sweeper",
             input_len: int = 128) -> dict:
    """One level (after a warmup round) with one of CLIENTS: our client as shipped (http1.py,
    kept-alive connections) on asyncio's loop, with a new connection per request (-close), on
    uvloop's loop (-uvloop, what `sweeper` uses when uvloop is installed); the aiohttp client sweeper
    shipped before (bench/other_clients.py); or the httpx variant. The reference server's record is
    reset after the warmup, so its truth covers the level only. Adds the client's CPU time per
    streamed token (this process runs only the client: the server is a subprocess)."""
    if client not in CLIENTS:
        raise ValueError(f"unknown client {client!r} (known: {', '.join(CLIENTS)})")
    prompts = build_prompt_token_ids(n_requests, input_len, seed=concurrency)
    warm = build_prompt_token_ids(concurrency, input_len, seed=10_000 + concurrency)
    if client == "httpx":
        from other_clients import run_closed_loop_httpx as runner  # bench/ is on sys.path
    elif client.startswith("aiohttp"):
        from other_clients import run_closed_loop_aiohttp as runner
    else:
        async def runner(u, model, p, out, c):
            async with new_session(keep_alive=client != "sweeper-close") as session:
                return await run_closed_loop(u, model, p, out, c, session=session, options=StreamOptions())
    run_loop = asyncio.run
    if client.endswith("-uvloop"):
        import uvloop
        run_loop = uvloop.run
    run_loop(runner(url, "ref", warm, output_len, concurrency))
    server_lateness(url)  # reset: the truth is the measured run's
    cpu_start = time.process_time()
    run = run_loop(runner(url, "ref", prompts, output_len, concurrency))
    cpu_s = time.process_time() - cpu_start
    m = summarize_level(run.samples, concurrency, run.duration_s, requested_output_len=output_len, lag=run.lag)
    streamed = sum(s.streamed_tokens for s in run.samples)
    m["client_cpu_us_per_token"] = 1e6 * cpu_s / streamed if streamed else float("nan")
    return m


def machine_note() -> str:
    load = os.getloadavg()
    return (f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"load average {load[0]:.2f} at start")
