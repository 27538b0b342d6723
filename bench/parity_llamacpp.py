"""Parity on a real engine: our output tok/s and guidellm's against the same running llama-server
at C = 1, 4, 16 must agree within 3%.

    .venv/bin/python bench/parity_llamacpp.py [--repeats 3] [--rounds 8] [--levels 1,4,16]

Needs the llama-server build (`make llama-server`) and guidellm with its local tokenizer
(`bash bench/setup_guidellm.sh`). Starts ONE llama-server (an 8 x 512 random-weight model written
by sweeper's generator unless --model; `-np 16 -c 8192 -t 1 --temp 0`) and keeps it running; then,
per repeat and level, runs our client (sweeper.loadgen's closed loop and metrics, the code of
`sweeper load`) and guidellm (concurrent profile, the same number of requests), in alternating
order, so that drift of a busy machine falls on both sides alike.

Both sides send the same kind of requests, and count the same thing:
- prompts are text: our prompt token ids, detokenized by the server (/detokenize), a fresh set per
  run (a set sent twice would hit llama-server's prompt cache); guidellm reads its set from a JSONL
  file (`prompt`, `output_tokens_count`), so its own synthetic text (sized by its word-level
  tokenizer, a few server tokens) does not make its prefill cheaper than ours;
- `max_tokens` = output length with `ignore_eos: true` (guidellm adds both when the data gives an
  output count), so every request streams exactly that many tokens; the server's default sampling
  is greedy (`--temp 0`), which our client asks for explicitly and guidellm does not set;
- output tokens are the server's `usage.completion_tokens` on both sides (our client also checks
  them against the streamed chunks); the script checks every request of both got exactly the
  output length;
- the rate is output tokens over the wall span from the first request sent to the last completed
  (guidellm: `output_tokens_per_second.successful.mean`, its time-weighted mean over that span).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests
from common import free_port, machine_note

from sweeper.engines.llamacpp import llama_server_path
from sweeper.loadgen.client import StreamOptions, run_closed_loop
from sweeper.loadgen.metrics import summarize_level
from sweeper.loadgen.workload import build_prompt_token_ids
from sweeper.models.random_gguf import write_random_gguf

MODEL_NAME = "random"  # llama-server serves its one model under any name


def start_server(binary: str, model: Path, port: int, threads: int, log: Path) -> subprocess.Popen:
    argv = [binary, "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
            "-np", "16", "-c", "8192", "-t", str(threads), "--temp", "0"]
    return subprocess.Popen(argv, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)


def wait_healthy(url: str, server: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError("llama-server exited; see its log")
        try:
            if requests.get(url + "/health", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} not healthy after {timeout_s} s")


def text_prompts(url: str, n: int, input_len: int, seed: int) -> list[str]:
    """Our prompt ids as the server's own text: both clients then send text of the same kind."""
    return [requests.post(url + "/detokenize", json={"tokens": ids}, timeout=10).json()["content"]
            for ids in build_prompt_token_ids(n, input_len, seed)]


def run_ours(url: str, prompts: list[str], output_len: int, concurrency: int) -> dict:
    options = StreamOptions(continuous_usage=True)  # as guidellm asks
    run = asyncio.run(run_closed_loop(url, MODEL_NAME, prompts, output_len, concurrency, options=options))
    m = summarize_level(run.samples, concurrency, run.duration_s, requested_output_len=output_len, lag=run.lag)
    exact = all(s.ok and s.output_tokens == output_len for s in run.samples)
    return {"tok_s": m["output_throughput"], "exact": exact, "lag_p99_ms": m["client_lag_p99_ms"],
            "prompt_tokens": m["total_input_tokens"] / len(prompts), "valid": m["valid"]}


def run_guidellm(exe: str, tokenizer: str, url: str, prompts: list[str], output_len: int,
                 concurrency: int, folder: Path) -> dict:
    data, out = folder / "prompts.jsonl", folder / "guidellm.json"
    data.write_text("".join(json.dumps({"prompt": p, "output_tokens_count": output_len}) + "\n" for p in prompts))
    argv = [exe, "run",
            "--backend", f"kind=openai_http,target={url},model={MODEL_NAME},request_format=/v1/completions",
            "--profile", f"kind=concurrent,streams={concurrency}",
            "--constraint", f"kind=max_requests,count={len(prompts)}",
            "--tokenizer", f"kind=hf_auto,model={tokenizer}",
            "--data", f"kind=json_file,path={data}",
            "--output", f"kind=json,path={out}", "--disable-console"]
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"guidellm failed:\n{done.stdout[-3000:]}")
    bench = json.loads(out.read_text())["benchmarks"][0]
    metrics, requests_ok = bench["metrics"], bench["requests"]["successful"]
    exact = (len(requests_ok) == len(prompts)
             and all(r["output_metrics"]["text_tokens"] == output_len for r in requests_ok))
    return {"tok_s": metrics["output_tokens_per_second"]["successful"]["mean"], "exact": exact,
            "prompt_tokens": metrics["prompt_token_count"]["successful"]["mean"]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--levels", default="1,4,16")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved pairs per level")
    parser.add_argument("--rounds", type=int, default=8, help="requests per run = rounds * C")
    parser.add_argument("--input-len", type=int, default=32, help="prompt ids before detokenizing")
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="llama-server -t (1 leaves a core to the client)")
    parser.add_argument("--model", type=Path, help="a GGUF; default: a fresh 8 x 512 random model")
    parser.add_argument("--llama-server", default=llama_server_path())
    parser.add_argument("--guidellm", default="/tmp/benchvenv/bin/guidellm")
    parser.add_argument("--tokenizer", default="/tmp/bench-tokenizer")
    parser.add_argument("--tolerance", type=float, default=3.0, help="percent")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    print(machine_note())
    work = Path(tempfile.mkdtemp(prefix="parity-llamacpp-"))
    model = args.model or work / "random-8x512.gguf"
    if args.model is None:
        write_random_gguf(model, 8, 512, seed=0)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_server(args.llama_server, model, port, args.threads, work / "server.log")
    results: dict[int, dict[str, list[dict]]] = {c: {"ours": [], "guidellm": []} for c in levels}
    try:
        wait_healthy(url, server)
        run_ours(url, text_prompts(url, 16, args.input_len, 999_999), args.output_len, 16)  # warm the server
        for repeat in range(args.repeats):
            for index, c in enumerate(levels):
                n = args.rounds * c
                order = ("ours", "guidellm") if (repeat + index) % 2 == 0 else ("guidellm", "ours")
                for side in order:
                    seed = 1000 * repeat + 10 * c + (side == "guidellm")
                    prompts = text_prompts(url, n, args.input_len, seed)
                    if side == "ours":
                        result = run_ours(url, prompts, args.output_len, c)
                    else:
                        result = run_guidellm(args.guidellm, args.tokenizer, url, prompts, args.output_len, c,
                                              Path(tempfile.mkdtemp(dir=work)))
                    results[c][side].append(result)
                    print(f"repeat {repeat + 1} C={c} {side}: {result['tok_s']:.1f} tok/s "
                          f"(prompt {result['prompt_tokens']:.1f} tokens, exact output counts: {result['exact']})",
                          flush=True)
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
    return report(results, levels, args)


def report(results: dict[int, dict[str, list[dict]]], levels: list[int], args) -> int:
    print(f"\n{args.repeats} interleaved pairs per level, {args.rounds} rounds of C per run, "
          f"{args.output_len} output tokens; mean over the repeats [min-max]\n")
    print("| C | requests per run | ours tok/s | guidellm tok/s | difference | within "
          f"{args.tolerance:g}% | output counts exact |")
    print("|---|---|---|---|---|---|---|")
    ok = True
    for c in levels:
        ours = [r["tok_s"] for r in results[c]["ours"]]
        theirs = [r["tok_s"] for r in results[c]["guidellm"]]
        exact = all(r["exact"] for side in results[c].values() for r in side)
        diff = 100 * (statistics.mean(ours) - statistics.mean(theirs)) / statistics.mean(theirs)
        within = abs(diff) <= args.tolerance
        ok &= within and exact
        print(f"| {c} | {args.rounds * c} | {statistics.mean(ours):.1f} [{min(ours):.1f}-{max(ours):.1f}] | "
              f"{statistics.mean(theirs):.1f} [{min(theirs):.1f}-{max(theirs):.1f}] | {diff:+.2f}% | "
              f"{'yes' if within else 'NO'} | {'yes' if exact else 'NO'} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
