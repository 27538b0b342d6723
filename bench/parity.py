"""Parity: our output tok/s and guidellm's against the same simulator at C = 1, 2, 4, 8, 16 must
agree within 2%.

    /tmp/v/bin/python bench/parity.py [--guidellm /tmp/benchvenv/bin/guidellm] [--levels 1,2,4,8,16]

Starts the simulator (`python -m sweeper.sim`, the optimum config of the demo space, time scale
--time-scale) on a free port; runs our client (sweeper.loadgen.ladder, the same code as `sweeper
load`) and then guidellm (concurrent profile, one benchmark per level, same requests per level)
against it. Both numbers are wall tok/s (the simulator's clock is scaled; neither side rescales).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import free_port, machine_note, wait_port

from sweeper.loadgen.client import StreamOptions
from sweeper.loadgen.ladder import LoadPlan
from sweeper.loadgen.standalone import measure_level


def start_sim(port: int, time_scale: float) -> subprocess.Popen:
    argv = [sys.executable, "-m", "sweeper.sim", "--model-path", "demo", "--port", str(port),
            "--tp-size", "8", "--ep-size", "8", "--time-scale", str(time_scale), "--load-seconds", "0"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def guidellm_levels(exe: str, url: str, levels: list[int], n: dict[int, int], output_len: int,
                    input_len: int, tokenizer: str) -> dict[int, float]:
    rates = {}
    for c in levels:
        out = Path(tempfile.mkdtemp()) / "guidellm.json"
        argv = [exe, "run",
                "--backend", f"kind=openai_http,target={url},model=demo,request_format=/v1/completions",
                "--profile", f"kind=concurrent,streams={c}",
                "--constraint", f"kind=max_requests,count={n[c]}",
                "--tokenizer", f"kind=hf_auto,model={tokenizer}",
                "--data", f"kind=synthetic_text,prompt_tokens={input_len},output_tokens={output_len}",
                "--output", f"kind=json,path={out}", "--disable-console"]
        env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=600)
        m = json.loads(out.read_text())["benchmarks"][0]["metrics"]
        rates[c] = m["output_tokens_per_second"]["successful"]["mean"]
    return rates


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--levels", default="1,2,4,8,16")
    parser.add_argument("--time-scale", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=4, help="requests per level = rounds * C")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--guidellm", default="/tmp/benchvenv/bin/guidellm")
    parser.add_argument("--tokenizer", default="/tmp/bench-tokenizer")
    args = parser.parse_args()
    print(machine_note())
    levels = [int(x) for x in args.levels.split(",")]
    n = {c: args.rounds * c for c in levels}
    port = free_port()
    sim = start_sim(port, args.time_scale)
    try:
        wait_port(port, 60)
        url = f"http://127.0.0.1:{port}"
        plan = LoadPlan(concurrency=tuple(levels), input_len=args.input_len, output_len=args.output_len,
                        requests_per_level=0, min_rounds=args.rounds, options=StreamOptions())
        ours = {c: measure_level(url, "demo", plan, c) for c in levels}
        theirs = guidellm_levels(args.guidellm, url, levels, n, args.output_len, args.input_len, args.tokenizer)
    finally:
        os.killpg(sim.pid, 15)
        sim.wait(timeout=30)
    print("| C | requests | ours tok/s (wall) | guidellm tok/s (wall) | difference | within 2% |")
    print("|---|---|---|---|---|---|")
    ok = True
    for c in levels:
        diff = 100 * (ours[c]["output_throughput"] - theirs[c]) / theirs[c]
        ok &= abs(diff) <= 2
        print(f"| {c} | {n[c]} | {ours[c]['output_throughput']:.1f} | {theirs[c]:.1f} | {diff:+.2f}% | "
              f"{'yes' if abs(diff) <= 2 else 'NO'} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
