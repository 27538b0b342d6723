"""Parity on a real engine: our output tok/s and guidellm's against the same running llama-server
at C = 1, 4, 16 must agree within 3% (each held against the server's own account of its runs).

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

This machine is shared, and a run's rate drifts with everyone else's load by more than 3% from one
run to the next. So besides the means over the repeats, each run is also held against the server's
own account of the same run, from its log: output tokens (`eval time = ... / N tokens`) over the
span from the first `launch_slot_` to the last `release` line. Both clients' ratios to that truth,
run by run, cancel the drift: their difference is the clients' disagreement alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import requests
from common import free_port, machine_note

from sweeper.engines.llamacpp import llama_server_path
from sweeper.loadgen.client import StreamOptions, run_closed_loop
from sweeper.loadgen.metrics import summarize_level
from sweeper.loadgen.workload import build_prompt_token_ids
from sweeper.models.random_gguf import write_random_gguf

MODEL_NAME = "random"  # llama-server serves its one model under any name
TASK = re.compile(r"\| task (\d+) \|")
LOG_SETTLE_S = 1.0  # the server's log thread writes a run's last lines shortly after it ends


def start_server(binary: str, model: Path, port: int, threads: int, log: Path,
                 cpus: set[int] | None = None) -> subprocess.Popen:
    argv = [binary, "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
            "-np", "16", "-c", "8192", "-t", str(threads), "--temp", "0"]
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    return subprocess.Popen(argv, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=pin)


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


def log_seconds(line: str) -> float:
    """llama-server's log time stamp `M.SS.mmm.uuu` (since start) in seconds."""
    minutes, seconds, millis, micros = (int(x) for x in line.split(" ", 1)[0].split("."))
    return 60 * minutes + seconds + millis / 1e3 + micros / 1e6


def server_rate(log_text: str, requests: int) -> float:
    """Output tok/s of one run as the server saw it: generated tokens over first slot launch to
    last slot release of the tasks launched in `log_text` (the lines the run added). The server
    logs from a worker thread, so a line can land after the run ends: the tasks are matched by id,
    and every one of them must have its token count and release."""
    launched, released, tokens = {}, {}, {}
    for line in log_text.splitlines():
        match = TASK.search(line)
        if match is None:
            continue
        task = int(match.group(1))
        if "launch_slot_:" in line:
            launched[task] = log_seconds(line)
        elif "slot      release:" in line:
            released[task] = log_seconds(line)
        elif "|        eval time =" in line:
            tokens[task] = int(line.split("eval time =")[1].split("/")[1].split()[0])
    ours = set(launched)
    if len(ours) != requests or not ours <= set(released) or not ours <= set(tokens):
        raise RuntimeError(f"the server log holds {len(ours)} launches, {len(set(released) & ours)} releases "
                           f"and {len(set(tokens) & ours)} token counts of the run's {requests} requests")
    return sum(tokens[t] for t in ours) / (max(released[t] for t in ours) - min(launched.values()))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    with open(folder / "guidellm.log", "w") as log:  # a file, not a pipe its workers could hold open
        # its own process group: guidellm runs its requests in worker processes, and an interrupted
        # run must not leave them streaming (llama-server would not stop while they do)
        done = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            done.wait(timeout=900)
        finally:
            try:
                os.killpg(done.pid, signal.SIGKILL)  # leftovers only: the group is empty after a clean exit
            except ProcessLookupError:
                pass
            done.wait()
    if done.returncode != 0:
        raise RuntimeError(f"guidellm failed:\n{(folder / 'guidellm.log').read_text()[-3000:]}")
    bench = json.loads(out.read_text())["benchmarks"][0]
    metrics, requests_ok = bench["metrics"], bench["requests"]["successful"]
    exact = (len(requests_ok) == len(prompts)
             and all(r["output_metrics"]["text_tokens"] == output_len for r in requests_ok))
    return {"tok_s": metrics["output_tokens_per_second"]["successful"]["mean"], "exact": exact,
            "prompt_tokens": metrics["prompt_token_count"]["successful"]["mean"]}


def requests_per_run(args, concurrency: int) -> int:
    return max(args.rounds * concurrency, args.min_requests)


@dataclass(frozen=True)
class Served:
    """The one llama-server every run measures: its URL, its process, its log, the scratch folder."""

    url: str
    process: subprocess.Popen
    log: Path
    work: Path


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--levels", default="1,4,16")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved pairs per level")
    parser.add_argument("--rounds", type=int, default=8, help="requests per run = rounds * C ...")
    parser.add_argument("--min-requests", type=int, default=16, help="... and at least this many")
    parser.add_argument("--input-len", type=int, default=32, help="prompt ids before detokenizing")
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="llama-server -t (1 leaves a core to the client)")
    parser.add_argument("--model", type=Path, help="a GGUF; default: a fresh 8 x 512 random model")
    parser.add_argument("--llama-server", default=llama_server_path())
    parser.add_argument("--guidellm", default="/tmp/benchvenv/bin/guidellm")
    parser.add_argument("--tokenizer", default="/tmp/bench-tokenizer")
    parser.add_argument("--tolerance", type=float, default=3.0, help="percent")
    parser.add_argument("--pin", action="store_true",
                        help="server on CPU 1, both clients on CPU 0: a client's own CPU use cannot slow the server")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    if args.pin:
        os.sched_setaffinity(0, {0})  # this script, our client and guidellm (its child) share CPU 0
    levels = [int(x) for x in args.levels.split(",")]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the server is stopped in `finally`
    print(machine_note())
    work = Path(tempfile.mkdtemp(prefix="parity-llamacpp-"))
    model = args.model or work / "random-8x512.gguf"
    if args.model is None:
        write_random_gguf(model, 8, 512, seed=0)
    port = free_port()
    log = work / "server.log"
    process = start_server(args.llama_server, model, port, args.threads, log, {1} if args.pin else None)
    served = Served(f"http://127.0.0.1:{port}", process, log, work)
    try:
        wait_healthy(served.url, served.process)
        warmup = text_prompts(served.url, 16, args.input_len, 999_999)
        run_ours(served.url, warmup, args.output_len, 16)  # warm the server
        results = run_pairs(args, served, levels)
    finally:
        os.killpg(served.process.pid, 15)
        served.process.wait(timeout=30)
    return report(results, levels, args)


def run_pairs(args: argparse.Namespace, served: Served, levels: list[int]) -> dict[int, dict[str, list[dict]]]:
    """Per repeat and level, one run of each client, in alternating order; each run printed as it ends."""
    results: dict[int, dict[str, list[dict]]] = {c: {"ours": [], "guidellm": []} for c in levels}
    for repeat in range(args.repeats):
        for index, c in enumerate(levels):
            order = ("ours", "guidellm") if (repeat + index) % 2 == 0 else ("guidellm", "ours")
            for side in order:
                result = measure_run(args, served, side, c, seed=1000 * repeat + 10 * c + (side == "guidellm"))
                results[c][side].append(result)
                print(f"repeat {repeat + 1} C={c} {side}: {result['tok_s']:.1f} tok/s, server "
                      f"{result['server_tok_s']:.1f} (ratio {result['ratio']:.4f}, server CPU "
                      f"{result['cpu_ms_per_token']:.2f} ms a token) "
                      f"(prompt {result['prompt_tokens']:.1f} tokens, exact output counts: {result['exact']})",
                      flush=True)
    return results


def measure_run(args: argparse.Namespace, served: Served, side: str, c: int, seed: int) -> dict:
    """One client's run at C on fresh prompts, with the server's CPU per token and its own rate of
    the same run (from the log lines the run added), and the client's ratio to that rate."""
    n = requests_per_run(args, c)
    prompts = text_prompts(served.url, n, args.input_len, seed)
    log_from, cpu_from = served.log.stat().st_size, cpu_seconds(served.process.pid)
    if side == "ours":
        result = run_ours(served.url, prompts, args.output_len, c)
    else:
        result = run_guidellm(args.guidellm, args.tokenizer, served.url, prompts, args.output_len, c,
                              Path(tempfile.mkdtemp(dir=served.work)))
    # the server's CPU per generated token: the same on both sides means a server rate
    # that differs between them is the CPU the server got (contention), not its work
    result["cpu_ms_per_token"] = 1000 * (cpu_seconds(served.process.pid) - cpu_from) / (n * args.output_len)
    time.sleep(LOG_SETTLE_S)
    with open(served.log, "rb") as text:
        text.seek(log_from)
        result["server_tok_s"] = server_rate(text.read().decode(errors="replace"), n)
    result["ratio"] = result["tok_s"] / result["server_tok_s"]
    return result


def report(results: dict[int, dict[str, list[dict]]], levels: list[int], args) -> int:
    print(f"\n{args.repeats} interleaved pairs per level, {args.rounds} rounds of C (at least "
          f"{args.min_requests} requests) per run, "
          f"{args.output_len} output tokens; mean over the repeats [min-max]\n")
    print("| C | requests per run | ours tok/s | guidellm tok/s | difference of means | ours / server "
          f"| guidellm / server | difference against the server | within {args.tolerance:g}% | output counts exact |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ok = True
    for c in levels:
        ours = [r["tok_s"] for r in results[c]["ours"]]
        theirs = [r["tok_s"] for r in results[c]["guidellm"]]
        ours_ratio = statistics.mean(r["ratio"] for r in results[c]["ours"])
        their_ratio = statistics.mean(r["ratio"] for r in results[c]["guidellm"])
        exact = all(r["exact"] for side in results[c].values() for r in side)
        diff = 100 * (statistics.mean(ours) - statistics.mean(theirs)) / statistics.mean(theirs)
        drift_free = 100 * (ours_ratio - their_ratio) / their_ratio
        within = abs(drift_free) <= args.tolerance  # the means also carry the machine's drift
        ok &= within and exact
        print(f"| {c} | {requests_per_run(args, c)} | {statistics.mean(ours):.1f} [{min(ours):.1f}-{max(ours):.1f}] | "
              f"{statistics.mean(theirs):.1f} [{min(theirs):.1f}-{max(theirs):.1f}] | {diff:+.2f}% | "
              f"{ours_ratio:.4f} | {their_ratio:.4f} | {drift_free:+.2f}% | "
              f"{'yes' if within else 'NO'} | {'yes' if exact else 'NO'} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
