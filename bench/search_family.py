"""The search on a family of response surfaces it was never tuned for (issue 20's benchmark).

For each surface of bench/surfaces.py, with and without the space's seeds, and each strategy (grid,
random, `tpe` = the default before issue 20, `local` = `auto` before the GP, `auto` = the
default now: search/gp.py): over N sampler seeds, the
median number of real evaluations until a config within 2% of the surface's optimum has been
measured (true value; the search sees noisy ones), and how many seeds get there inside 36.

    cd bench && nice -n 10 ../.venv/bin/python search_family.py [SPACE] [--seeds 20] [--first-seed 0] [--cap 60] [--jobs 2]
"""

from __future__ import annotations

import argparse
import statistics
import warnings
from multiprocessing import Pool
from pathlib import Path

import optuna

from model_search import evaluations_to_reach, simulate_search
from surfaces import FAMILY, family, optimum
from sweeper.spec.space_file import load_space
from sweeper.search.samplers import GridOrderSampler, build_sampler

warnings.filterwarnings("ignore")
INSIDE = 36


def strategies(space, budget):
    return {
        "grid": lambda seed: GridOrderSampler(space),
        "random": lambda seed: optuna.samplers.RandomSampler(seed=seed),
        "old default (tpe)": lambda seed: build_sampler(space, budget, "tpe", seed),
        "previous auto (local)": lambda seed: build_sampler(space, budget, "local", seed),
        "new default (auto = gp)": lambda seed: build_sampler(space, budget, "auto", seed),
        "model": lambda seed: build_sampler(space, budget, "model", seed),
        "hybrid": lambda seed: build_sampler(space, budget, "hybrid", seed),
    }


def needed(space, surface, make, seeds: range, cap: int, use_seeds: bool, target: float) -> list[int]:
    counts = []
    for seed in seeds:
        trace = simulate_search(space, make(seed), cap, use_seeds=use_seeds, surface=surface,
                                noise_seed=seed, stop_at=target)
        reached = evaluations_to_reach(trace, target)
        counts.append(reached if reached is not None else cap + 1)
    return counts


def cell(counts: list[int], cap: int) -> str:
    median = statistics.median(counts)
    shown = f"{median:.0f}" if median <= cap else f">{cap}"
    return f"{shown} ({sum(c <= INSIDE for c in counts)}/{len(counts)})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("space", nargs="?", default="../search_spaces/demo-sim.yaml")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0,
                        help="sampler (and noise) seeds FIRST..FIRST+SEEDS-1: seeds a variant was not chosen on")
    parser.add_argument("--cap", type=int, default=60, help="evaluations before a search gives up")
    parser.add_argument("--surfaces", nargs="*", default=list(FAMILY))
    parser.add_argument("--only", nargs="*", default=["grid", "random", "old default (tpe)", "previous auto (local)",
                                                      "new default (auto = gp)"],
                        help="strategies to run (also: model, hybrid)")
    parser.add_argument("--jobs", type=int, default=2, help="rows measured in parallel")
    args = parser.parse_args()
    space = load_space(Path(args.space))
    runs = {k: v for k, v in strategies(space, space.budget.trials).items() if not args.only or k in args.only}
    print(f"{args.space}: {args.seeds} seeds from {args.first_seed}, cap {args.cap}; cell = median evaluations to within 2% "
          f"(seeds inside {INSIDE})")
    print("| surface | noise | within 2% / allowed configs | seeds | " + " | ".join(runs) + " |")
    print("|---|---|---|---|" + "---|" * len(runs))
    rows = [(args, name, use_seeds) for name in args.surfaces if name != "sim" or space.engine == "sim"
            for use_seeds in (True, False)]
    with Pool(args.jobs) as pool:
        for line in pool.imap(row_of, rows):  # rows in order, each as soon as it is done
            print(line, flush=True)


def row_of(job: tuple) -> str:
    return row(*job)


def row(args, surface_name: str, use_seeds: bool) -> str:
    """One table row: a surface, with or without the seeds, every strategy."""
    space = load_space(Path(args.space))
    runs = {k: v for k, v in strategies(space, space.budget.trials).items() if not args.only or k in args.only}
    surface = family(space, [surface_name])[0]
    best, near, allowed = optimum(space, surface)
    cells = [cell(needed(space, surface, make, range(args.first_seed, args.first_seed + (1 if name == "grid" else args.seeds)),
                         args.cap, use_seeds, 0.98 * best), args.cap) for name, make in runs.items()]
    return (f"| {surface.name} | {surface.noise:.0%} | {near}/{allowed} | {'yes' if use_seeds else 'no'} | "
            + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
