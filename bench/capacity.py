"""Capacity: the highest aggregate streamed token rate our client ingests on ONE core while the
accuracy bound holds (output tok/s within 1% of the truth, TTFT and ITL medians within 0.5 ms)
and the level is valid by sweeper's own rules (client lag among them),
for sweeper's client (http1.py) and the aiohttp and httpx variants, then guidellm at the same
concurrency against the same server.

    /tmp/benchvenv/bin/python bench/capacity.py [--levels 10,20,40,60,80,100,150] [--guidellm /tmp/benchvenv/bin/guidellm]

The client runs pinned to core --client-cpu (os.sched_setaffinity; guidellm under taskset, all its
processes), the reference server to --server-cpu. Every stream sends one token per --gap-ms after
--ttft-ms, --output-len tokens per request, so the offered rate is C * 1000 / gap-ms tok/s. The
truth is what the server actually wrote (bench/accuracy.py explains why).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import CLIENTS, actual_truth, errors_against, machine_note, refserver, run_ours, server_lateness, within_bounds


def run_guidellm(exe: str, url: str, c: int, n: int, output_len: int, cpu: int, tokenizer: str) -> dict:
    out = Path(tempfile.mkdtemp()) / "guidellm.json"
    argv = ["taskset", "-c", str(cpu), exe, "run",
            "--backend", f"kind=openai_http,target={url},model=ref,request_format=/v1/completions",
            "--profile", f"kind=concurrent,streams={c}",
            "--constraint", f"kind=max_requests,count={n}",
            "--tokenizer", f"kind=hf_auto,model={tokenizer}",
            "--data", f"kind=synthetic_text,prompt_tokens=128,output_tokens={output_len}",
            "--output", f"kind=json,path={out}", "--disable-console"]
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    return guidellm_metrics(json.loads(out.read_text()))


def guidellm_metrics(report: dict) -> dict:
    """guidellm's own headline numbers, named like ours."""
    m = report["benchmarks"][0]["metrics"]
    return {"output_throughput": m["output_tokens_per_second"]["successful"]["mean"],
            "median_ttft_ms": m["time_to_first_token_ms"]["successful"]["median"],
            "median_itl_ms": m["inter_token_latency_ms"]["successful"]["median"],
            "completed": m["request_totals"]["successful"], "errored": m["request_totals"]["errored"]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--levels", default="10,20,40,60,80,100,150")
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--gap-ms", type=float, default=5.0)
    parser.add_argument("--output-len", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", default="sweeper,aiohttp,httpx", help="of " + ", ".join(CLIENTS))
    parser.add_argument("--client-cpu", type=int, default=0)
    parser.add_argument("--server-cpu", type=int, default=1)
    parser.add_argument("--guidellm", default="/tmp/benchvenv/bin/guidellm", help="'' to skip")
    parser.add_argument("--tokenizer", default="/tmp/bench-tokenizer")
    parser.add_argument("--guidellm-levels", default="", help="C values for guidellm (default: --levels)")
    args = parser.parse_args()
    print(machine_note())
    os.sched_setaffinity(0, {args.client_cpu})
    levels = [int(x) for x in args.levels.split(",")]
    best: dict[str, tuple[int, float]] = {}
    print("| client | C | offered tok/s | truth tok/s | measured tok/s | error | TTFT err ms | ITL err ms | "
          "client lag p99 ms | client CPU us/token | valid | within bounds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    with refserver(args.ttft_ms, args.gap_ms, cpu=args.server_cpu) as url:
        for client in args.clients.split(","):
            for c in levels:
                m = run_ours(url, c, args.rounds * c, args.output_len, client=client)
                truth = actual_truth(server_lateness(url))
                err = errors_against(m, truth)
                good = within_bounds(err)
                if good and m["valid"] and m["output_throughput"] > best.get(client, (0, 0.0))[1]:
                    best[client] = (c, m["output_throughput"])
                print(f"| {client} | {c} | {c * 1000 / args.gap_ms:.0f} | {truth['output_tok_s']:.0f} | "
                      f"{m['output_throughput']:.0f} | {err['tok_s_err_pct']:+.2f}% | {err['ttft_err_ms']:+.2f} | "
                      f"{err['itl_err_ms']:+.3f} | {m['client_lag_p99_ms']:.1f} | "
                      f"{m['client_cpu_us_per_token']:.1f} | {m['valid']} | "
                      f"{'yes' if good else 'NO'} |", flush=True)
        for client, (c, rate) in best.items():
            print(f"capacity {client}: {rate:.0f} tok/s at C={c}")
        if args.guidellm and Path(args.guidellm).exists():
            guide_levels = [int(x) for x in args.guidellm_levels.split(",")] if args.guidellm_levels else levels
            for c in guide_levels:
                server_lateness(url)
                g = run_guidellm(args.guidellm, url, c, args.rounds * c, args.output_len, args.client_cpu,
                                 args.tokenizer)
                truth = actual_truth(server_lateness(url))
                err = errors_against(g, truth)
                print(f"| guidellm | {c} | {c * 1000 / args.gap_ms:.0f} | {truth['output_tok_s']:.0f} | "
                      f"{g['output_throughput']:.0f} | {err['tok_s_err_pct']:+.2f}% | {err['ttft_err_ms']:+.2f} | "
                      f"{err['itl_err_ms']:+.3f} | - | - | errored {g['errored']} | "
                      f"{'yes' if within_bounds(err) else 'NO'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
