"""SLO capacity search against a server whose queueing is known exactly: bench/refserver.py with
--max-batch B (at most B streams at once, the rest wait in arrival order). A slot is busy
S = TTFT + (output_len - 1) * GAP per request, so a closed loop at C runs in waves of B and its
worst TTFT is TTFT + (ceil(C / B) - 1) * S: the true capacity at a p99 TTFT SLO of T is
B * (floor((T - TTFT) / S) + 1). Each SLO is put half a wave inside a step, so the truth is not
a coin flip.

    /work/main/.venv/bin/python bench/capacity_search.py [--batch 4 --ttft-ms 10 --gap-ms 2 --output-len 16]

For each SLO: the capacity `sweeper load --find-capacity` finds (the same code, loadgen/ladder.py
run_capacity_search, in-process) vs the truth, the levels it measured, and what a fixed ladder
needs: every C from 1 up to the first failing one to get the same resolution of 1, and the
default sweep ladder (1, 2, 4, 8, 16, 32), which brackets the answer only within a power of two.
"""

from __future__ import annotations

import argparse
import math
import time

from common import machine_note, refserver

from sweeper.loadgen.capacity import CapacitySlo
from sweeper.loadgen.client import StreamOptions
from sweeper.loadgen.ladder import LoadPlan
from sweeper.loadgen.standalone import run_capacity_search

DEFAULT_LADDER = (1, 2, 4, 8, 16, 32)


def true_capacity(slo_ms: float, batch: int, ttft_ms: float, service_ms: float) -> int:
    return batch * (math.floor((slo_ms - ttft_ms) / service_ms) + 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--ttft-ms", type=float, default=10.0)
    parser.add_argument("--gap-ms", type=float, default=2.0)
    parser.add_argument("--output-len", type=int, default=16)
    parser.add_argument("--waves", default="0,1,2,4", help="SLOs half a wave into these wave counts")
    parser.add_argument("--min-rounds", type=int, default=20)
    parser.add_argument("--ceiling", type=int, default=64)
    args = parser.parse_args()
    service_ms = args.ttft_ms + (args.output_len - 1) * args.gap_ms
    plan = LoadPlan(input_len=16, output_len=args.output_len, min_rounds=args.min_rounds,
                    max_client_lag_ms=50.0, options=StreamOptions())
    print(f"# {machine_note()}")
    print(f"# refserver: batch {args.batch}, TTFT {args.ttft_ms:g} ms, gap {args.gap_ms:g} ms, "
          f"{args.output_len} tokens: a slot is busy {service_ms:g} ms; min_rounds {args.min_rounds}, "
          f"ceiling {args.ceiling}")
    print("| p99 TTFT SLO ms | true C | found C | first failing | levels (search) | levels tried "
          "| fixed step-1 ladder | default ladder says | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    with refserver(args.ttft_ms, args.gap_ms, max_batch=args.batch) as url:
        for waves in (int(w) for w in args.waves.split(",")):
            slo_ms = args.ttft_ms + (waves + 0.5) * service_ms
            truth = true_capacity(slo_ms, args.batch, args.ttft_ms, service_ms)
            started = time.monotonic()
            record = run_capacity_search(url, "ref", plan, CapacitySlo(p99_ttft_ms=slo_ms), rate=False,
                                         ceiling=args.ceiling, resolution=1)
            seconds = time.monotonic() - started
            tried = [int(level["load"]) for level in record["levels"]]
            holding = {int(level["load"]) for level in record["levels"] if level["slo_holds"]}
            ladder_says = max((c for c in DEFAULT_LADDER if c <= truth), default=0)
            step_one = min(truth + 1, args.ceiling)  # C = 1, 2, ... up to the first that fails
            print(f"| {slo_ms:g} | {truth} | {record['capacity_concurrency']} | {record['first_failing']} "
                  f"| {len(tried)} | {','.join(f'{c}' + ('' if c in holding else 'x') for c in tried)} "
                  f"| {step_one} | >= {ladder_says}, < {min((c for c in DEFAULT_LADDER if c > truth), default='-')} "
                  f"| {seconds:.0f} |", flush=True)
            for level in record["levels"]:
                if not level["slo_holds"] and int(level["load"]) <= truth:  # a miss: say why
                    print(f"#   C={int(level['load'])} failed below the truth: {'; '.join(level['slo_broken_by'])} "
                          f"({level['invalid_reason']})", flush=True)


if __name__ == "__main__":
    main()
