"""Where a vLLM level's variance comes from (issue 29): one config on fresh launches, measured in
each launch several ways, M repeats each, with the server's and the GPU's side recorded beside.

    python3 bench/gpu/vllm/variance.py MODEL OUT_DIR --launches 3 --deadline UNIX_TS [--tag default]
        [--server-args '--stream-interval 4'] [--plan full|short]

Per launch (the server in its own session, stopped by its process group, never by name):
- `rounds`       the old default level: 1 warm-up round, then 3 rounds of C equal requests (1.9 s at
                 C=128 in the issue), duration = first send to last end (ramp-up and drain inside)
- `rounds_long`  the same, 10 rounds
- `steady_burst` the steady-state level (loadgen/precision.py: ramp and drain left out, MSER warm-up,
                 batch means, sent until the 95% CI is within 1% or 20 s), all C started at once
- `steady`       the same with staggered first requests (ladder.py `ramp: stagger`): the default
- `steady_pinned` steady with the client's event loop on a core apart from the server's threads
- `vllm_bench`   `vllm bench serve --temperature 0` (staggered arrivals at 400 req/s under
                 --max-concurrency), its per-request detail kept, for the agreement check
Beside every run: the server's /metrics every 0.25 s (generation tokens, requests running and
waiting, prefix-cache hits), nvidia-smi every 0.2 s (SM clock, power, temperature, utilisation),
the CPU seconds of the client and of each server process. Everything goes to OUT_DIR:
runs.jsonl (one record per run), server_metrics.csv, nvidia_smi.csv, launches.jsonl, logs.
variance_table.py turns them into bench/gpu/README.md's tables.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np

from sweeper.engines.vllm import VLLM_INFO
from sweeper.loadgen.ladder import LadderHooks, run_ladder
from sweeper.loadgen.onhost import controller_runner
from sweeper.loadgen.pinning import client_apart
from sweeper.loadgen.precision import estimate_of_run, ramp_end, steady_estimate
from sweeper.spec.space import Workload
from sweeper.trial.load_ladder import build_level_plan

from server_group import stop_server  # beside this script (run.sh runs it by path)

PORT = 8100
SCRAPE_EVERY_S = 0.25
METRICS = ("vllm:generation_tokens_total", "vllm:num_requests_running", "vllm:num_requests_waiting",
           "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")
LAUNCH_BUDGET_S = {"full": 150, "short": 90, "cause": 100}  # a launch's ready time + its plan, to decide whether one more fits

# (name, C, repeats, on which launches (1-based; None: every one)): the before (rounds) and after
# (steady) on every launch, the suspects' variants on fewer
PLANS = {
    "full": [("rounds", 128, 3, None), ("rounds", 32, 3, None), ("rounds_long", 128, 3, None),
             ("rounds_long", 32, 3, None), ("steady_burst", 128, 1, None), ("steady", 128, 3, None),
             ("steady", 32, 3, None), ("steady_pinned", 128, 1, (2, 4)), ("vllm_bench", 128, 1, (1, 4))],
    "short": [("rounds", 128, 3, None), ("steady", 128, 3, None), ("rounds_long", 128, 2, None)],
    "cause": [("steady", 128, 2, None), ("rounds", 128, 2, None)],
}


def log(msg: str) -> None:
    print(f"-- {time.strftime('%H:%M:%S')} {msg}", flush=True)


def get_text(path: str, timeout: float = 10) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=timeout)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        return answer.status, answer.read().decode("utf-8", "replace")
    finally:
        conn.close()


def metric_values(text: str) -> dict[str, float]:
    """The METRICS' values summed over their label sets (one model here)."""
    values = dict.fromkeys(METRICS, 0.0)
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in values:
            values[name] += float(line.rsplit(" ", 1)[1])
    return values


class Sampler(threading.Thread):
    """/metrics every SCRAPE_EVERY_S into a CSV (unix time first), until stopped."""

    def __init__(self, out: Path, launch: int, pids: dict[str, int] | None = None) -> None:
        super().__init__(daemon=True)
        self.out, self.launch, self.stopping = out, launch, threading.Event()
        self.pids = pids or {}

    def run(self) -> None:
        with self.out.open("a") as f:
            while not self.stopping.wait(SCRAPE_EVERY_S):
                try:
                    values = metric_values(get_text("/metrics", 2)[1])
                except OSError:
                    continue
                where = [str(on_cpu(self.pids[r])) if r in self.pids else "-1" for r in ("APIServer", "EngineCore")]
                f.write(",".join([str(self.launch), f"{time.time():.3f}", *(f"{values[m]:.0f}" for m in METRICS),
                                  *where, str(on_cpu(os.getpid()))]) + "\n")


def group_cpu_s(pgid: int) -> dict[str, float]:
    """CPU seconds (user + system) of each process in the group, by pid:comm."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[2]) == pgid:
                comm = stat[stat.index("(") + 1:stat.rindex(")")]
                found[f"{entry.name}:{comm}"] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, ValueError, IndexError):
            continue
    return found


def physical_cores() -> list[list[int]]:
    """Logical CPUs grouped by physical core (SMT siblings together), in order."""
    cores = {}
    for cpu in range(os.cpu_count() or 1):  # all of them: this process may be pinned already
        siblings = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text().strip()
        cores.setdefault(siblings, []).append(cpu)
    return list(cores.values())


def role_pids(log_text: str) -> dict[str, int]:
    """vLLM's log prefixes: '(APIServer pid=627)', '(EngineCore pid=750)'."""
    import re
    return {role: int(pid) for role, pid in re.findall(r"\((APIServer|EngineCore)[^ ]* pid=(\d+)\)", log_text)}


def pin_roles(pids: dict[str, int], pgid: int) -> dict:
    """The engine core and the API server each on a physical core of its own (both its SMT
    siblings), this client on a third, every other thread of the server's group on the rest."""
    cores = physical_cores()
    if len(cores) < 4:
        return {}
    plan = {"EngineCore": set(cores[0]), "APIServer": set(cores[1]), "client": set(cores[2]),
            "rest": {c for core in cores[3:] for c in core}}
    os.sched_setaffinity(0, plan["client"])
    for pid in group_pids(pgid):
        role = next((r for r, p in pids.items() if p == pid), "rest")
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                os.sched_setaffinity(int(task.name), plan[role])
            except OSError:
                pass
    return {k: sorted(v) for k, v in plan.items()}


def group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                if int(stat[stat.rindex(")") + 2:].split()[2]) == pgid:
                    pids.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return pids


def on_cpu(pid: int) -> int:
    """The logical CPU a process last ran on (/proc/PID/stat field 39)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2:].split()[36])
    except (OSError, ValueError, IndexError):
        return -1


def start_server(model: str, out: Path, extra: list[str], env: dict | None = None) -> tuple[subprocess.Popen, float]:
    argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", model, "--host", "127.0.0.1",
            "--port", str(PORT), "--max-model-len", "4096", "--gpu-memory-utilization", "0.9", *extra]
    if os.environ.get("VARIANCE_SERVER"):  # a stand-in server for a dry run of this script on a CPU
        argv = [*os.environ["VARIANCE_SERVER"].split(), "--port", str(PORT)]
    (out / "server.argv.json").write_text(json.dumps(argv))
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=(out / "server.log").open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True, env={**os.environ, **(env or {})})
    while time.monotonic() - started < 300:
        if proc.poll() is not None:
            raise SystemExit(f"server exited {proc.returncode} before /health (see {out / 'server.log'})")
        try:
            if get_text("/health", 2)[0] == 200:
                return proc, time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.25)
    stop_server(proc)
    raise SystemExit("server not ready in 300 s")


def plan_for(kind: str, concurrency: int, vocab: int):
    """The sweep's own plan (trial/ladder.build_level_plan, vLLM's dialect) for one kind of level."""
    rounds = 10 if kind == "rounds_long" else 3
    steady = kind.startswith("steady")
    workload = Workload(input_len=64, output_len=64, concurrency=[concurrency], min_rounds=rounds, warmup_rounds=1,
                        measure="steady" if steady else "rounds", precision=0.01 if steady else None,
                        max_seconds=15 if steady else None, ramp="burst" if kind == "steady_burst" else "stagger")
    return build_level_plan(workload, VLLM_INFO.dialect, vocab_size=vocab, engine_measure="steady")


class Kept(LadderHooks):
    """Keeps each measured run (the ladder hands its runs to run_done)."""

    def __init__(self) -> None:
        self.runs = []

    def run_done(self, level, repeat, run):
        self.runs.append(run)


def run_record(kind: str, concurrency: int, level: dict, run, offset: float, cpu: dict) -> dict:
    """What one run keeps: the level's numbers, the run's span in unix time, the whole-run and
    windowed estimates from its raw samples, per-request times, the CPU seconds it cost."""
    done = [s for s in run.samples if s.ok]
    ramped = ramp_end(done, concurrency) or run.start
    stopped = run.stopped_at if run.stopped_at is not None else max(s.start for s in done)
    windowed = estimate_of_run(done, ramped, stopped)
    keep = ("output_throughput", "output_throughput_ci_low", "output_throughput_ci_high", "batches",
            "precision_reached", "warmup_dropped_s", "ramp_s", "drain_s", "window_s", "stopped_by", "duration",
            "completed", "valid", "invalid_reasons", "client_lag_p99_ms", "concurrency", "tokens_per_chunk",
            "median_ttft_ms", "median_itl_ms", "p99_itl_ms")
    return {
        "kind": kind, "c": concurrency, **{k: level.get(k) for k in keep},
        "t_start": run.start + offset, "t_end": run.end + offset,
        "t_ramp_end": ramped + offset, "t_stop": stopped + offset,
        "whole_run_tok_s": sum(s.output_tokens for s in done) / run.duration_s,
        "windowed_tok_s": windowed.value, "windowed_batches": windowed.batches,
        "requests": [[round(s.start + offset, 4), round(s.ttft, 4), round(s.end - s.start, 4), s.output_tokens]
                     for s in done],
        "cpu_s": cpu,
    }


def measure(kind: str, concurrency: int, model: str, vocab: int, pgid: int) -> list[dict]:
    plan = plan_for(kind, concurrency, vocab)
    kept = Kept()
    send_run = controller_runner(f"http://127.0.0.1:{PORT}", model)

    def send(prompts, c, until=None, offsets=None):
        return send_run(prompts, plan.output_len, c, plan.options, until, offsets=offsets)

    offset = time.time() - time.perf_counter()
    before_server, before_client = group_cpu_s(pgid), time.process_time()
    with client_apart(pgid) if kind == "steady_pinned" else nullcontext(""):
        levels, _ = run_ladder(plan, send, kept)
    client_s = time.process_time() - before_client
    after_server = group_cpu_s(pgid)
    cpu = {"client": round(client_s, 3),
           **{k: round(v - before_server.get(k, 0.0), 3) for k, v in after_server.items()
              if v - before_server.get(k, 0.0) > 0.01}}
    return [run_record(kind, concurrency, levels[concurrency], run, offset, cpu) for run in kept.runs[-1:]]


def vllm_bench(model: str, out: Path, tag: str, concurrency: int) -> dict:
    """vllm bench serve, greedy, staggered arrivals under --max-concurrency; its per-request
    detail turned into token arrivals and windowed as sweeper windows its own runs."""
    n = 20 * concurrency
    cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve", "--backend", "vllm",
           "--base-url", f"http://127.0.0.1:{PORT}", "--model", model, "--tokenizer", model,
           "--dataset-name", "random", "--random-input-len", "64", "--random-output-len", "64",
           "--num-prompts", str(n), "--max-concurrency", str(concurrency), "--request-rate", "400",
           "--ignore-eos", "--seed", "0", "--temperature", "0", "--save-result", "--save-detailed",
           "--result-dir", str(out), "--result-filename", f"{tag}.json"]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    (out / f"{tag}.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        return {"kind": "vllm_bench", "c": concurrency, "rc": r.returncode, "t_start": t0, "t_end": time.time()}
    result = json.loads((out / f"{tag}.json").read_text())
    starts = result["start_times"]  # perf_counter of its process; only differences are used
    times, tokens, latencies, samples = [], [], [], []
    for start, ttft, itls in zip(starts, result["ttfts"], result["itls"]):
        arrivals = list(start + ttft + np.concatenate([[0.0], np.cumsum(itls)]))
        times += arrivals
        tokens += [1] * len(arrivals)
        latencies.append(arrivals[-1] - start)
        samples.append(_Sample(start, arrivals[-1]))
    # its arrivals are staggered (400 req/s): the ramp is its first C requests by send time
    ramped = max(s.end for s in sorted(samples, key=lambda s: s.start)[:concurrency])
    stopped = max(starts)
    est = steady_estimate(times, tokens, latencies, ramped, stopped)
    return {"kind": "vllm_bench", "c": concurrency, "rc": 0, "bench_output_throughput": result["output_throughput"],
            "windowed_tok_s": est.value, "windowed_batches": est.batches,
            "ci": [est.ci_low, est.ci_high], "duration": result["duration"],
            "bench_t0": min(starts), "ramp_s": ramped - min(starts), "drain_s": max(t for t in times) - stopped,
            "window_s": est.window_s, "t_start": t0, "t_end": time.time()}


class _Sample:
    def __init__(self, start: float, end: float) -> None:
        self.start, self.end = start, end


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("out", type=Path)
    parser.add_argument("--launches", type=int, default=5)
    parser.add_argument("--first-launch", type=int, default=1)
    parser.add_argument("--deadline", type=float, default=time.time() + 550)
    parser.add_argument("--tag", default="default")
    parser.add_argument("--server-args", default="")
    parser.add_argument("--plan", choices=sorted(PLANS), default="full")
    parser.add_argument("--concurrency", type=int, default=0, help="every level at this C instead (a dry run)")
    parser.add_argument("--schedule", default="", help="per launch: f|c (fresh compile cache or the shared one) "
                        "and p|u (server roles pinned to cores of their own, or not), e.g. fu,cp,cu,fp,cp")
    return parser.parse_args()


def start_smi(out: Path) -> subprocess.Popen:
    """nvidia-smi every 0.2 s (clocks, power, temperature, utilisation, throttling) into
    nvidia_smi.csv; `true` where there is none (a dry run)."""
    smi = "nvidia-smi" if shutil.which("nvidia-smi") else "true"
    query = ("--query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,"
             "clocks_throttle_reasons.active")
    return subprocess.Popen([smi, query, "--format=csv,noheader,nounits", "-lms", "200"],
                            stdout=(out / "nvidia_smi.csv").open("a"), stderr=subprocess.DEVNULL)


def run_launch(args: argparse.Namespace, launch: int, vocab: int) -> None:
    """One fresh server (a fresh compile cache for mode f, its roles pinned for mode p), the plan
    measured beside the /metrics sampler, then the server stopped and the launch recorded."""
    folder = args.out / f"{args.tag}_launch{launch}"
    folder.mkdir(exist_ok=True)
    mode = args.schedule.split(",")[launch - args.first_launch] if args.schedule else "cu"
    env = {"VLLM_CACHE_ROOT": f"/tmp/vllm-cache-fresh-{launch}"} if mode[0] == "f" else {}
    os.sched_setaffinity(0, {c for core in physical_cores() for c in core})  # the server inherits it
    proc, ready_s = start_server(args.model, folder, args.server_args.split(), env)
    pids = role_pids((folder / "server.log").read_text())
    pinned = pin_roles(pids, proc.pid) if mode[1] == "p" else {}
    log(f"launch {launch} ({args.tag}, {mode}): ready in {ready_s:.1f}s, roles {pids}, pinned {pinned}")
    sampler = Sampler(args.out / "server_metrics.csv", launch, pids)
    sampler.start()
    try:
        measure_plan(args, launch, folder, proc.pid, vocab)
    finally:
        sampler.stopping.set()
        sampler.join(5)
        stopped_s = stop_server(proc)
        with (args.out / "launches.jsonl").open("a") as f:
            f.write(json.dumps({"launch": launch, "tag": args.tag, "ready_s": round(ready_s, 1),
                                "stop_s": round(stopped_s, 1), "server_args": args.server_args,
                                "mode": mode, "roles": pids, "pinned": pinned,
                                "cores": physical_cores()}) + "\n")


def measure_plan(args: argparse.Namespace, launch: int, folder: Path, pgid: int, vocab: int) -> None:
    """The plan's runs this launch takes part in, M repeats each, while 25 s remain before the deadline."""
    seq = 0
    for kind, c, repeats, only in PLANS[args.plan]:
        c = args.concurrency or c
        if only is not None and launch not in only:
            continue
        for repeat in range(repeats):
            if time.time() + 25 > args.deadline:
                break
            seq += 1
            if kind == "vllm_bench":
                records = [vllm_bench(args.model, folder, f"vb_{seq}", c)]
            else:
                records = measure(kind, c, args.model, vocab, pgid)
            append_runs(args.out / "runs.jsonl", records, kind, c, launch=launch, tag=args.tag, seq=seq,
                        repeat=repeat)


def append_runs(path: Path, records: list[dict], kind: str, c: int, **where) -> None:
    """A run's records (launch, tag, seq, repeat added) appended to runs.jsonl, each logged."""
    with path.open("a") as f:
        for record in records:
            record.update(where)
            f.write(json.dumps(record) + "\n")
            value = record.get("output_throughput") or record.get("windowed_tok_s") or 0.0
            whole = record.get("whole_run_tok_s") or record.get("bench_output_throughput") or 0.0
            log(f"  {kind} C={c} #{where['repeat'] + 1}: {value:,.0f} tok/s (whole run {whole:,.0f})")


def main() -> None:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    vocab = json.loads((Path(args.model) / "config.json").read_text())["vocab_size"]
    smi = start_smi(args.out)
    try:
        for launch in range(args.first_launch, args.first_launch + args.launches):
            if time.time() + LAUNCH_BUDGET_S[args.plan] > args.deadline:
                log(f"launch {launch}: not enough time left before the deadline")
                break
            run_launch(args, launch, vocab)
    finally:
        smi.terminate()

if __name__ == "__main__":
    main()
