"""Precision-driven levels, measured: for a few `precision` settings, what a level costs (requests,
wall seconds) and how far repeated levels of one server really spread, against the 95% CI each
claims (does it cover the pooled mean of all repeats?). Beside them, today's fixed level
(warmup_rounds 1, min_rounds 2) for its cost and spread.

    .venv/bin/python bench/precision.py [--engine sim|llamacpp|both] [--repeats 6] [--precisions 0.05,0.02,0.01]

sim: `python -m sweeper.sim` (baseline config, --time-scale 0.02: tok/s are modelled). llamacpp:
one llama-server (8 x 512 random-weight model written by sweeper's generator, -np 16, -t 1) on
this machine. Each level is `sweeper load`'s code (loadgen/standalone.py measure_level).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Iterator

from common import ROOT, free_port, machine_note, wait_port

from sweeper.loadgen.client import StreamOptions
from sweeper.loadgen.ladder import LoadPlan
from sweeper.loadgen.standalone import discover_model, measure_level

SIM_SCALE = 0.02
SIM_FLAGS = ["--tp", "8", "--moe-runner-backend", "marlin", "--attention-backend", "triton",
             "--mem-fraction-static", "0.70"]


@contextmanager
def sim_server() -> Iterator[tuple[str, float]]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "sweeper.sim", "--model-path", "deepseek-ai/DeepSeek-V4-Flash", "--host",
            "127.0.0.1", "--port", str(port), "--time-scale", str(SIM_SCALE), "--load-seconds", "30",
            "--random-seed", "7", *SIM_FLAGS]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        wait_ready(f"http://127.0.0.1:{port}")
        yield f"http://127.0.0.1:{port}", SIM_SCALE
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


@contextmanager
def llama_server(model_path: str | None = None) -> Iterator[tuple[str, float]]:
    from sweeper.engines.llamacpp import llama_server_path

    with tempfile.TemporaryDirectory() as tmp:
        model = Path(model_path) if model_path else Path(tmp) / "random-8x512.gguf"
        if not model_path:
            from sweeper.models.random_gguf import write_random_gguf
            write_random_gguf(model, layers=8, width=512, seed=0)
        port = free_port()
        argv = [llama_server_path(), "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
                "-np", "16", "-c", "8192", "-t", "1", "--temp", "0"]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_port(port, 60)
            wait_ready(f"http://127.0.0.1:{port}")
            yield f"http://127.0.0.1:{port}", 1.0
        finally:
            os.killpg(proc.pid, 9)
            proc.wait()


def wait_ready(url: str, timeout_s: float = 60.0) -> None:
    from sweeper.loadgen.oneshot import get_status

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if get_status(url + "/v1/models", 2.0) == 200:
            return
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {timeout_s} s")


def measure(url: str, plan: LoadPlan, concurrency: int, repeats: int) -> list[dict]:
    model = discover_model(url)
    rows = []
    for i in range(repeats):
        started = time.perf_counter()
        level = measure_level(url, model, replace(plan, seed=plan.seed + 1000 * i), concurrency)
        rows.append({**level, "wall_s": time.perf_counter() - started})
        print(f"  precision {plan.precision}: {level['output_throughput']:.1f} tok/s "
              f"[{level.get('output_throughput_ci_low')}, {level.get('output_throughput_ci_high')}] "
              f"{level['completed']} requests, {rows[-1]['wall_s']:.1f} s, valid {level['valid']}, "
              f"retries {level.get('harness_retries')}, stopped by {level.get('stopped_by')}", file=sys.stderr)
    return rows


def describe(name: str, rows: list[dict], truth: float) -> str:
    values = [r["output_throughput"] for r in rows]
    spread = statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else 0.0
    valid = sum(bool(r["valid"]) for r in rows)
    retries = sum(r.get("harness_retries") or 0 for r in rows)
    line = (f"| {name} | {valid}/{len(rows)} | {retries} | {statistics.mean(r['completed'] for r in rows):.0f} | "
            f"{statistics.mean(r['wall_s'] for r in rows):.1f} | {statistics.mean(values):.1f} | {spread:.1%} | ")
    if "batches" not in rows[0]:
        return line + "- | - | - | - |"
    covered = sum(r["output_throughput_ci_low"] <= truth <= r["output_throughput_ci_high"] for r in rows)
    half = statistics.mean(r["precision_half_width"] for r in rows)
    reached = sum(bool(r["precision_reached"]) for r in rows)
    warm = statistics.mean(r["warmup_dropped_s"] for r in rows)
    return line + f"{half:.1%} | {covered}/{len(rows)} | {reached}/{len(rows)} | {warm:.2f} |"


def bench(engine: str, precisions: list[float], repeats: int, concurrency: int, max_seconds: float,
          max_client_lag_ms: float, model: str | None = None) -> None:
    server = sim_server() if engine == "sim" else llama_server(model)
    base = LoadPlan(concurrency=(concurrency,), input_len=128, output_len=32, options=StreamOptions(),
                    text_prompts=engine == "llamacpp", max_client_lag_ms=max_client_lag_ms)
    with server as (url, scale):
        base = replace(base, time_scale=scale)
        results = {"fixed (warmup 1, 2 rounds)": measure(url, base, concurrency, repeats)}
        for p in precisions:
            plan = replace(base, precision=p, max_seconds=max_seconds)
            results[f"precision {p:g}"] = measure(url, plan, concurrency, repeats)
    # the truth: the pooled mean of the precise levels (all of them estimate the same steady state)
    precise = [r["output_throughput"] for name, rows in results.items() if name.startswith("precision") for r in rows]
    truth = statistics.mean(precise)
    print(f"\n### {engine}, C={concurrency}, input 128, output 32, {repeats} levels per row, "
          f"max_seconds {max_seconds:g} (modelled), client lag bar {max_client_lag_ms:g} ms; pooled mean {truth:.1f} tok/s\n")
    print("| level | valid | harness retries | requests (last run) | wall s | mean tok/s | spread (CV) | mean CI half-width | CI covers pooled mean "
          "| precision reached | warm-up dropped s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, rows in results.items():
        print(describe(name, rows, truth))
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=["sim", "llamacpp", "both"], default="both")
    parser.add_argument("--precisions", default="0.05,0.02,0.01")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-seconds", type=float, default=60.0, help="cap per level (modelled s on the sim)")
    parser.add_argument("--max-client-lag-ms", type=float, default=5.0, help="raise on a busy, shared machine")
    parser.add_argument("--model", help="llama.cpp: this GGUF instead of a fresh 8 x 512 random-weight one")
    parser.add_argument("--sim-wall", action="store_true", default=True,
                        help="--max-seconds is wall time on the sim too (the default)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout` still stops the server we started
    precisions = [float(p) for p in args.precisions.split(",")]
    print(machine_note())
    for engine in (["sim", "llamacpp"] if args.engine == "both" else [args.engine]):
        max_seconds = args.max_seconds / (SIM_SCALE if engine == "sim" and args.sim_wall else 1.0)
        bench(engine, precisions, args.repeats, args.concurrency, max_seconds, args.max_client_lag_ms, args.model)


if __name__ == "__main__":
    main()
