"""Trials per hour with 1, 2 and 4 hosts on one PostgreSQL study (issue 8's benchmark).

Each "host" is a local-transport host entry of its own (own work dir, own port range) running the
simulator with a fixed, sleep-dominated start-up (--load-seconds x --time-scale of wall time), so
a trial costs the same on every host and the speed-up measures the coordination: worker start,
claims under the study lock, lease acquire/renew, heartbeats, and the tail of the last round.
A private PostgreSQL cluster is started for the run (tests/pg.py) and stopped at the end.

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

from sweeper.results.leaderboard import is_evaluation  # noqa: E402
from tests.pg import start_cluster  # noqa: E402

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


def run_once(folder: Path, url: str, space: Path, count: int, trials: int) -> tuple[float, int]:
    """Wall seconds from `sweeper sweep` to its exit, and the evaluations the study recorded."""
    hosts = hosts_file(folder, count)
    study = f"par-{count}-{int(time.time())}"
    argv = [sys.executable, "-m", "sweeper.cli", "sweep", str(space), "--hosts", str(hosts), "--storage", url,
            "--study", study, "--trials", str(trials), "--results", str(folder / "results")]
    for i in range(count):
        argv += ["--host", f"h{i}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - started
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
    return wall, sum(1 for t in trials if is_evaluation(t))


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
            wall, evaluations = run_once(folder, cluster.create_database(), space, count, args.trials)
            rows.append((count, wall, evaluations, evaluations / wall * 3600))
            print(f"{count} hosts: {evaluations} evaluations in {wall:.1f} s = {rows[-1][3]:.0f} trials/hour",
                  flush=True)
    finally:
        cluster.stop()
    base = rows[0][3]
    print("\n| hosts | evaluations | wall s | trials/hour | speed-up |\n|---|---|---|---|---|")
    for count, wall, evaluations, per_hour in rows:
        print(f"| {count} | {evaluations} | {wall:.1f} | {per_hour:.0f} | {per_hour / base:.2f}x |")


if __name__ == "__main__":
    main()
