"""Trials per hour with 1, 2 and 4 hosts on one PostgreSQL study (issue 8's benchmark).

Each "host" is a local-transport host entry of its own (own work dir, own port range) running the
simulator with a fixed, sleep-dominated start-up (--load-seconds x --time-scale of wall time), so
a trial costs the same on every host and the speed-up measures the coordination: worker start,
claims under the study lock, lease acquire/renew, heartbeats, and the tail of the last round.
A private PostgreSQL cluster is started for the run (tests/support/pg.py) and stopped at the end.

    python bench/parallel.py [--trials 12] [--hosts 1,2,4] [--boot-s 15]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sweeper.study.trials import is_evaluation
from tests.support.pg import start_cluster  # noqa: E402

SPACE = """\
name: parallel-bench
engine: sim
model: deepseek-ai/DeepSeek-V4-Flash
fixed_flags: {{--time-scale: {scale}, --load-seconds: {load}, --disable-cuda-graph: true, --noise: 0.0,
              --tp-size: 8, --mem-fraction-static: 0.85}}
fixed_env: {{SGL_FORCE_SHUTDOWN: "1"}}
parameters:
  chunked_prefill_size: {{type: categorical, choices: [{choices}], flag: --chunked-prefill-size}}
workload: {{input_len: 32, output_len: 8, concurrency: [1, 2], min_rounds: 1, warmup_rounds: 0}}
budget: {{trials: {trials}}}
search: {{sampler: brute}}
check: {{mode: none}}
launch: {{ready_timeout_s: 600, stall_timeout_s: 60, stop_grace_s: 5}}
"""


def hosts_file(folder: Path, count: int) -> Path:
    hosts = {f"h{i}": {"transport": "local", "gpus": 8, "work_dir": str(folder / f"work-h{i}"),
                       "base_port": 34000 + 1000 * i, "gpu_gate": "off"} for i in range(count)}
    path = folder / f"hosts-{count}.yaml"
    path.write_text(yaml.safe_dump({"hosts": hosts}))
    return path


def run_once(folder: Path, url: str, space: Path, count: int, trials: int) -> dict:
    """Wall seconds from `sweeper sweep` to its exit; the span from the first launch to the last
    trial's end; start-up (command to first trial) and tail (last trial to exit); evaluations."""
    hosts = hosts_file(folder, count)
    study = f"par-{count}-{int(time.time())}"
    argv = [sys.executable, "-m", "sweeper.cli", "sweep", str(space), "--hosts", str(hosts), "--storage", url,
            "--study", study, "--trials", str(trials), "--results", str(folder / "results")]
    for i in range(count):
        argv += ["--host", f"h{i}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.time()
    done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=3600)
    ended = time.time()
    if done.returncode != 0:
        raise SystemExit(f"sweep failed ({count} hosts): {done.stderr[-2000:]}")
    trials = optuna.load_study(study_name=study, storage=url).get_trials()
    if os.environ.get("BENCH_TIMELINE"):
        t0 = min(t.datetime_start for t in trials if t.datetime_start)
        for t in trials:
            if t.datetime_start:
                end = (t.datetime_complete - t0).total_seconds() if t.datetime_complete else None
                print(f"  trial {t.number} {t.user_attrs.get('host')} {t.state.name} "
                      f"{(t.datetime_start - t0).total_seconds():.1f}..{end} {t.params} "
                      f"{'dup' if 'duplicate_of' in t.user_attrs else ''} {t.user_attrs.get('stage_seconds', '')}")
    first = min(t.datetime_start.timestamp() for t in trials if t.datetime_start)
    last = max(t.datetime_complete.timestamp() for t in trials if t.datetime_complete)
    return {"hosts": count, "wall": ended - started, "span": last - first, "startup": first - started,
            "tail": ended - last, "evaluations": sum(1 for t in trials if is_evaluation(t))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--hosts", default="1,2,4")
    parser.add_argument("--boot-s", type=float, default=15.0, help="wall seconds of weight loading per launch")
    args = parser.parse_args()
    scale = 0.1
    folder = Path(tempfile.mkdtemp(prefix="sweeper-parallel-"))
    space = folder / "space.yaml"
    choices = ", ".join(str(1024 * (i + 1)) for i in range(max(args.trials * 2, 16)))
    space.write_text(SPACE.format(scale=scale, load=args.boot_s / scale, choices=choices, trials=args.trials))
    cluster = start_cluster()
    try:
        rows = []
        for count in (int(c) for c in args.hosts.split(",")):
            row = run_once(folder, cluster.create_database(), space, count, args.trials)
            row["per_hour"] = row["evaluations"] / row["wall"] * 3600
            row["span_per_hour"] = row["evaluations"] / row["span"] * 3600
            rows.append(row)
            print(f"{count} hosts: {row['evaluations']} evaluations in {row['wall']:.1f} s = {row['per_hour']:.0f} "
                  f"trials/hour (trials alone {row['span_per_hour']:.0f}/hour)", flush=True)
    finally:
        cluster.stop()
    base, span_base = rows[0]["per_hour"], rows[0]["span_per_hour"]
    print("\n| hosts | evaluations | wall s | start-up s | tail s | trials/hour | speed-up | trials/hour, launches only | speed-up |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['hosts']} | {r['evaluations']} | {r['wall']:.1f} | {r['startup']:.1f} | {r['tail']:.1f} | "
              f"{r['per_hour']:.0f} | {r['per_hour'] / base:.2f}x | {r['span_per_hour']:.0f} | "
              f"{r['span_per_hour'] / span_base:.2f}x |")


if __name__ == "__main__":
    main()
