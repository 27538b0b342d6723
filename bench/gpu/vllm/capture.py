"""Start one vLLM server by hand and capture what sweeper's tests need from the real thing, then
run `vllm bench serve` and `sweeper load` side by side on it with the server's /metrics as referee.

    python3 bench/gpu/vllm/capture.py MODEL OUT_DIR [--side-by-side 1,4,16] [--deadline UNIX_TS]

Writes into OUT_DIR: server.log, nvidia-smi while serving, raw SSE bytes of streamed completions and
chat requests with continuous usage (sse_*.jsonl: one line per socket read, its time and bytes),
the in-stream error of an out-of-vocabulary prompt, /tokenize and /v1/models answers, a torch
profiler trace (--profiler-config, 0.24's spelling), and per level: vllm bench serve's JSON,
sweeper load's JSON and a /metrics scrape before and after each client (metrics_*.txt).
The server is stopped by its process group (it runs in its own session), never by name.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import glob
import http.client
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from server_group import stop_server  # beside this script (run.sh runs it by path)

PORT = 8100


def log(msg: str) -> None:
    print(f"-- {time.strftime('%H:%M:%S')} {msg}", flush=True)


def post_json(path: str, body: dict, timeout: float = 60) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=timeout)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    answer = conn.getresponse()
    text = answer.read().decode("utf-8", "replace")
    conn.close()
    return answer.status, text


def get_text(path: str, timeout: float = 10) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=timeout)
    conn.request("GET", path)
    answer = conn.getresponse()
    text = answer.read().decode("utf-8", "replace")
    conn.close()
    return answer.status, text


def raw_stream(path: str, body: dict, out: Path) -> None:
    """Every read of a streamed answer as it came: {"t": seconds since send, "b": text}."""
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    start = time.perf_counter()
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    answer = conn.getresponse()
    lines = [json.dumps({"status": answer.status, "request": body})]
    while True:
        data = answer.read1(65536)
        if not data:
            break
        lines.append(json.dumps({"t": round(time.perf_counter() - start, 6), "b": data.decode("utf-8", "replace")}))
    conn.close()
    out.write_text("\n".join(lines) + "\n")


def wait_health(proc: subprocess.Popen, deadline_s: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < deadline_s:
        if proc.poll() is not None:
            raise SystemExit(f"server exited {proc.returncode} before /health")
        try:
            if get_text("/health", 2)[0] == 200:
                return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("server not ready in time")


def gpu_used_mib() -> int:
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else -1


def stop_group(proc: subprocess.Popen, out: Path) -> None:
    t0 = time.monotonic()
    exited = stop_server(proc)
    while gpu_used_mib() > 0 and time.monotonic() - t0 < 30:
        time.sleep(0.1)
    released = time.monotonic() - t0
    (out / "stop.json").write_text(json.dumps({"exit_s": round(exited, 2), "released_s": round(released, 2),
                                               "after_mib": gpu_used_mib()}))
    log(f"stopped: exit {exited:.1f}s, memory released {released:.1f}s")


def side_by_side(model: str, out: Path, levels: list[int], deadline: float, sweeper_py: list[str]) -> None:
    """Per level: vllm bench serve as it ships (server-default sampling), sweeper load, then vllm
    bench serve with --temperature 0 (greedy, as sweeper sends): a /metrics scrape around each.
    runs.json lists which scrapes bracket which client's run (promdiff.py reads it)."""
    runs: list[dict] = []
    scrape_n = [0]

    def scrape() -> str:
        name = f"metrics_{scrape_n[0]:02d}.txt"
        scrape_n[0] += 1
        (out / name).write_text(get_text("/metrics")[1])
        return name

    def bench(c: int, tag: str, extra: list[str]) -> int:
        n = max(8 * c, 32)
        cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve", "--backend", "vllm",
               "--base-url", f"http://127.0.0.1:{PORT}", "--model", model, "--tokenizer", model,
               "--dataset-name", "random", "--random-input-len", "64", "--random-output-len", "64",
               "--num-prompts", str(n), "--max-concurrency", str(c), "--ignore-eos", "--seed", "0",
               "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
               "--save-result", "--save-detailed", "--result-dir", str(out), "--result-filename", f"{tag}.json", *extra]
        r = subprocess.run(cmd, capture_output=True, text=True)
        (out / f"{tag}.log").write_text(r.stdout + r.stderr)
        log(f"vllm bench serve C={c} {' '.join(extra)}: exit {r.returncode}")
        return r.returncode

    def sweep_load(c: int, tag: str) -> int:
        n = max(8 * c, 32)
        cmd = sweeper_py + ["load", f"http://127.0.0.1:{PORT}", "--concurrency", str(c), "--input-len", "64",
                            "--output-len", "64", "--requests-per-level", str(n), "--model", model,
                            "--json-file", str(out / f"{tag}.json")]
        r = subprocess.run(cmd, capture_output=True, text=True)
        (out / f"{tag}.log").write_text(r.stdout + r.stderr)
        log(f"sweeper load C={c}: exit {r.returncode}")
        return r.returncode

    bench(16, "vb_warmup", [])  # a long warm-up first: batch sizes compiled, graphs captured
    bench(4, "vb_warmup_t0", ["--temperature", "0"])
    for c in levels:
        for client, tag, run in (("vllm bench serve", f"vb_c{c}", lambda: bench(c, f"vb_c{c}", [])),
                                 ("sweeper load", f"sw_c{c}", lambda: sweep_load(c, f"sw_c{c}")),
                                 ("vllm bench serve --temperature 0", f"vb_t0_c{c}",
                                  lambda: bench(c, f"vb_t0_c{c}", ["--temperature", "0"]))):
            if time.time() > deadline:
                log("side by side: deadline reached")
                break
            before = scrape()
            rc = run()
            runs.append({"c": c, "client": client, "result": f"{tag}.json", "before": before, "after": scrape(),
                         "rc": rc})
            (out / "runs.json").write_text(json.dumps(runs, indent=1))


SWEEPER_PY = [sys.executable, "-c", "import sys; from sweeper.cli import main; sys.argv[0] = 'sweeper'; sys.exit(main())"]
TRACE_DIR = Path("/tmp/vllm-traces")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("out", type=Path)
    parser.add_argument("--side-by-side", default="1,4,16")
    parser.add_argument("--deadline", type=float, default=time.time() + 400)
    parser.add_argument("--captures", type=int, default=1)
    return parser.parse_args()


def start_server(model: str, out: Path, logf) -> subprocess.Popen:
    """vllm serve in its own session, its torch profiler writing to TRACE_DIR (emptied first)."""
    shutil.rmtree(TRACE_DIR, ignore_errors=True)
    profiler = {"profiler": "torch", "torch_profiler_dir": str(TRACE_DIR), "torch_profiler_with_stack": False}
    argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", model, "--host", "127.0.0.1",
            "--port", str(PORT), "--max-model-len", "4096", "--profiler-config", json.dumps(profiler)]
    (out / "server.argv.json").write_text(json.dumps(argv))
    log(f"start: {' '.join(argv)}")
    return subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "VLLM_USE_FLASHINFER_SAMPLER": "0"})


def capture_gpu_state(out: Path) -> None:
    """nvidia-smi while serving: its page, the GPUs, the processes on them."""
    smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout
    (out / "nvidia_smi_serving.txt").write_text(smi)
    q = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name,driver_version,memory.used,memory.total",
                        "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    (out / "nvidia_smi_serving.gpu.csv").write_text(q)
    q = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True).stdout
    (out / "nvidia_smi_serving.apps.csv").write_text(q)


def capture_streams(model: str, out: Path) -> None:
    """/v1/models, /tokenize and /detokenize, raw SSE of completions and chat with continuous usage,
    and an out-of-vocabulary prompt streamed and not."""
    (out / "v1_models.json").write_text(get_text("/v1/models")[1])
    (out / "tokenize.json").write_text(json.dumps([post_json("/tokenize", {"model": model, "prompt": "the of and"}),
                                                   post_json("/detokenize", {"model": model, "tokens": [100, 16000, 16383]})]))
    opts = {"include_usage": True, "continuous_usage_stats": True}
    for i in range(6):
        prompt = [100 + (i * 7919 + k * 104729) % 16000 for k in range(64)]
        raw_stream("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 64, "temperature": 0,
                                       "stream": True, "stream_options": opts, "ignore_eos": True},
                   out / f"sse_completions_{i}.jsonl")
        raw_stream("/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": f"{i} the of and to in is was for on are"}],
                                            "max_tokens": 64, "temperature": 0, "stream": True, "stream_options": opts,
                                            "ignore_eos": True}, out / f"sse_chat_{i}.jsonl")
    raw_stream("/v1/completions", {"model": model, "prompt": [100, 40000, 31647], "max_tokens": 8, "stream": True,
                                   "stream_options": opts, "ignore_eos": True}, out / "sse_out_of_vocab.jsonl")
    (out / "out_of_vocab_unstreamed.json").write_text(json.dumps(post_json(
        "/v1/completions", {"model": model, "prompt": [100, 40000], "max_tokens": 8})))
    log("streams captured")


def capture_profile(model: str, out: Path) -> None:
    """A torch profiler trace of 8 concurrent completions: its files listed, the small JSON ones copied."""
    # profiler: 0.24 mounts /start_profile only with --profiler-config
    status = post_json("/start_profile", {})
    log(f"/start_profile: {status}")
    with cf.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: post_json("/v1/completions", {"model": model, "prompt": [200 + i] * 64,
                                                              "max_tokens": 16, "ignore_eos": True}), range(8)))
    log(f"/stop_profile: {post_json('/stop_profile', {}, timeout=120)}")
    for _ in range(60):
        found = sorted(glob.glob(str(TRACE_DIR / "**" / "*.json.gz"), recursive=True))
        if found:
            time.sleep(2)
            break
        time.sleep(1)
    found = sorted(glob.glob(str(TRACE_DIR / "**" / "*"), recursive=True))
    (out / "traces.txt").write_text("\n".join(f"{os.path.getsize(f)} {f}" for f in found if os.path.isfile(f)))
    for f in found:
        if os.path.isfile(f) and os.path.getsize(f) < 14_000_000 and "json" in f:
            shutil.copy(f, out / ("trace_" + os.path.basename(f)))
    log(f"traces: {found}")


def save_jit_lines(out: Path) -> None:
    jit = [line for line in (out / "server.log").read_text(errors="replace").splitlines() if "JIT" in line]
    (out / "jit_lines.txt").write_text("\n".join(jit) + "\n")
    log(f"JIT lines: {len(jit)}")


def main() -> None:
    args = parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    logf = open(out / "server.log", "wb")
    proc = start_server(args.model, out, logf)
    try:
        ready = wait_health(proc, 300)
        log(f"ready after {ready:.1f}s")
        (out / "ready.json").write_text(json.dumps({"ready_s": round(ready, 1)}))
        capture_gpu_state(out)
        if args.captures:
            capture_streams(args.model, out)
            capture_profile(args.model, out)
        levels = [int(c) for c in args.side_by_side.split(",") if c]
        if levels:
            side_by_side(args.model, out, levels, args.deadline, SWEEPER_PY)
        (out / "metrics_final.txt").write_text(get_text("/metrics")[1])
    finally:
        stop_group(proc, out)
        logf.close()
    save_jit_lines(out)

if __name__ == "__main__":
    main()
