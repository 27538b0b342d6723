"""bench/gpu/README.md's variance tables from variance.py's raw data (one or more tarballs of it).

    python3 bench/gpu/vllm/variance_table.py bench/gpu/vllm/h200/variance/*.tar.gz

Per launch: how its server compiled (a fresh torch.compile, "saved AOT compiled function", or the
artifact loaded from the compile cache, "Directly load AOT compilation"), whether its roles were
pinned, whether it had every core. Then, per way of measuring and level, the variance components
of the level's output tok/s over launches (sweeper.study.noise.variance_components: one-way
random effects, between-launch and within-launch CV).
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
from collections import defaultdict

import numpy as np

from sweeper.study.noise import variance_components


def read(paths: list[str]) -> tuple[list[dict], dict[int, dict]]:
    runs, launches = [], {}
    for path in paths:
        with tarfile.open(path) as tar:
            files = {m.name: m for m in tar.getmembers() if m.isfile()}

            def text(name: str) -> str:
                return tar.extractfile(files[name]).read().decode("utf-8", "replace") if name in files else ""
            runs += [json.loads(line) for line in io.StringIO(text("variance/runs.jsonl")) if line.strip()]
            for line in io.StringIO(text("variance/launches.jsonl")):
                if not line.strip():
                    continue
                launch = json.loads(line)
                log = text(f"variance/{launch['tag']}_launch{launch['launch']}/server.log")
                launch["compile"] = "fresh" if "saved AOT compiled function" in log else \
                    "cached" if "Directly load AOT compilation" in log else "?"
                # before a fix, a launch after a pinned one inherited the client's one core (its
                # recorded topology then has one core); the first launch of a run always had all
                previous = launches.get(launch["launch"] - 1)
                launch["all_cores"] = not (previous and previous.get("pinned") and len(launch.get("cores") or []) == 1
                                           or previous and not previous["all_cores"] and not launch.get("pinned"))
                launches[launch["launch"]] = launch
    return runs, launches


def value(run: dict) -> float:
    return run.get("output_throughput") or run.get("windowed_tok_s") or float("nan")


def launch_table(runs: list[dict], launches: dict[int, dict]) -> str:
    kinds = ("rounds@128", "rounds_long@128", "steady_burst@128", "steady@128", "steady_pinned@128",
             "rounds@32", "steady@32")
    by = defaultdict(list)
    for r in runs:
        by[(r["launch"], f"{r['kind']}@{r['c']}")].append(value(r))
    lines = ["| launch | compile | roles pinned | all cores | ready s | " + " | ".join(kinds) + " |",
             "|---|---|---|---|---|" + "---|" * len(kinds)]
    for n, launch in sorted(launches.items()):
        cells = [" / ".join(f"{v / 1000:.1f}k" for v in by[(n, k)]) or "" for k in kinds]
        lines.append(f"| {n} | {launch['compile']} | {'yes' if launch.get('pinned') else 'no'} | "
                     f"{'yes' if launch['all_cores'] else '**no: 1 core**'} | {launch['ready_s']:.0f} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def components_table(runs: list[dict], launches: dict[int, dict], groups: dict[str, callable]) -> str:
    lines = ["| launches | measured as | C | launches x repeats | mean tok/s | between-launch CV | within-launch CV |"
             " one run's CV |", "|---|---|---|---|---|---|---|---|"]
    for label, keep in groups.items():
        chosen = {n for n, launch in launches.items() if keep(launch)}
        series = defaultdict(lambda: defaultdict(list))
        for r in runs:
            if r["launch"] in chosen and r["kind"] != "vllm_bench":
                series[(r["kind"], r["c"])][r["launch"]].append(value(r))
        for (kind, c), per_launch in sorted(series.items(), key=lambda item: (item[0][1], item[0][0])):
            groups_ = [v for v in per_launch.values() if len(v) >= 2]
            if len(groups_) < 2:
                continue
            comp = variance_components(groups_)
            shape = f"{len(groups_)} x {min(map(len, groups_))}" + ("" if len(set(map(len, groups_))) == 1 else "+")
            lines.append(f"| {label} | {kind} | {c} | {shape} | {comp.mean:,.0f} | {comp.between_cv:.1%} | "
                         f"{comp.within_cv:.1%} | {comp.total_cv:.1%} |")
    return "\n".join(lines)


def main() -> None:
    runs, launches = read(sys.argv[1:])
    print("## Per launch (output tok/s of each run; k = 1,000)\n")
    print(launch_table(runs, launches))
    print("\n## Variance components\n")
    print(components_table(runs, launches, {
        "1-3 (1 fresh, 2 cached; unpinned)": lambda l: l["launch"] <= 3,
        "2-3 (cached, unpinned)": lambda l: l["launch"] in (2, 3),
        "11, 14, 15 (1 fresh, 2 cached; pinned)": lambda l: l["launch"] in (11, 14, 15),
        "14-15 (cached, pinned)": lambda l: l["launch"] in (14, 15),
    }))
    by_state = defaultdict(list)
    for r in runs:
        launch = launches.get(r["launch"])
        if launch and launch["all_cores"] and r["kind"] == "steady" and r["c"] == 128:
            by_state[launch["compile"]].append(value(r))
    print("\n## steady C=128 by compile state (every launch with all cores)\n")
    for state, values in sorted(by_state.items()):
        print(f"- {state}: n={len(values)} runs, mean {np.mean(values):,.0f}, range {min(values):,.0f}-{max(values):,.0f}")
    bench = [r for r in runs if r["kind"] == "vllm_bench" and r.get("rc") == 0]
    if bench:
        print("\n## vllm bench serve (--temperature 0, 400 req/s under --max-concurrency 128)\n")
        for r in bench:
            print(f"- launch {r['launch']}: bench's own {r['bench_output_throughput']:,.0f} tok/s over {r['duration']:.1f} s; "
                  f"sweeper's window on its requests {r['windowed_tok_s']:,.0f} ({r['windowed_batches']} batches, "
                  f"ramp {r['ramp_s']:.2f} s, drain {r['drain_s']:.2f} s)")


if __name__ == "__main__":
    main()
