"""How the correctness gate judged a finished simulator sweep, against the simulator's ground truth.

    .venv/bin/python bench/gate_study.py STUDY [--results results]

For every trial that reached check_output: did the gate pass it, and does the simulator serve
correct text for that config (sweeper.sim.failures: a MoE runner that misreads FP4 weights serves
garbage)? Prints false rejections (healthy config failed by the gate), misses (garbage config
passed), and for passes against the reference how much the answers differed from it.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from sweeper.spec.space_file import parse_space
from sweeper.sim.best import sim_config_of
from sweeper.sim.failures import FP4_CAPABLE_MOE_BACKENDS
from sweeper.search.configs import with_derived
from sweeper.study.store import load_study


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("study")
    parser.add_argument("--results", type=Path, default=Path("results"))
    args = parser.parse_args()
    study = load_study(args.study, args.results, None)
    space = parse_space(study.user_attrs["space_text"], "study")
    counts: Counter = Counter()
    agreements, tp_sizes = [], Counter()
    for trial in study.get_trials(deepcopy=False):
        if "duplicate_of" in trial.user_attrs:
            continue
        check_file = args.results / args.study / "trials" / str(trial.number) / "output_check.json"
        if not check_file.is_file():
            continue  # never reached the gate (rule, constraint, crash, hang)
        saved = json.loads(check_file.read_text())
        verdict = saved.get("verdict")
        if verdict is None:
            counts["gate request failed"] += 1
            continue
        cfg = sim_config_of(space, with_derived(space, dict(trial.params)))
        garbage = cfg.moe_runner_backend not in FP4_CAPABLE_MOE_BACKENDS  # FP4 experts read as FP8
        passed = verdict["passed"] and str(trial.number) not in (study.user_attrs.get("output_rejected") or {})
        against = verdict["compared_with"]
        counts[(("garbage" if garbage else "healthy"), ("pass" if passed else "fail"), against)] += 1
        if passed and against == "reference":
            agreements.append(verdict["agreement"])
            tp_sizes[trial.params.get("tp_size")] += 1
    print(f"study {args.study}: reference from {study.user_attrs.get('reference_source')}")
    for key, n in sorted(counts.items(), key=str):
        print(f"  {key}: {n}")
    false_rejections = sum(n for k, n in counts.items() if isinstance(k, tuple) and k[:2] == ("healthy", "fail"))
    misses = sum(n for k, n in counts.items() if isinstance(k, tuple) and k[:2] == ("garbage", "pass"))
    healthy = sum(n for k, n in counts.items() if isinstance(k, tuple) and k[0] == "healthy")
    garbage = sum(n for k, n in counts.items() if isinstance(k, tuple) and k[0] == "garbage")
    print(f"false rejections: {false_rejections} of {healthy} healthy; misses: {misses} of {garbage} garbage")
    if agreements:
        below = sum(a < 1.0 for a in agreements)
        print(f"passes against the reference: {len(agreements)} (TP sizes {dict(tp_sizes)}), "
              f"{below} with answers differing from it, lowest agreement {min(agreements):.2f}")


if __name__ == "__main__":
    main()
