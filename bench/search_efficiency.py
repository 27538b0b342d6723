"""Search efficiency on the simulator's response surface (issue 5's benchmark).

For each strategy and 20 seeds: the number of real evaluations until the best config is within 2%
of the model's exact optimum, and the evaluations spent on configs that crash. Strategies: grid
(the order a Cartesian sweep takes), random, plain TPE that records crashes as FAIL (what most
Optuna-based tuners do), and sweeper's default (auto sampler, seeds first, crashes infeasible).

    python bench/search_efficiency.py [SPACE] [--seeds 20] [--cap 400] [--only "sweeper default"]
"""

from __future__ import annotations

import argparse
import statistics
import warnings
from pathlib import Path

import optuna

from model_search import evaluations_to_reach, simulate_search
from sweeper.spec.space_file import load_space
from sweeper.search.samplers import GridOrderSampler, build_sampler
from sweeper.sim.best import best_config

warnings.filterwarnings("ignore")


def strategies(space, budget):
    return {
        "grid": lambda seed: (GridOrderSampler(space), False, False),
        "random": lambda seed: (optuna.samplers.RandomSampler(seed=seed), False, False),
        "tpe, crash=FAIL": lambda seed: (optuna.samplers.TPESampler(seed=seed), True, False),
        "sweeper default": lambda seed: (build_sampler(space, budget, "auto", seed), False, True),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("space", nargs="?", default="search_spaces/demo-sim.yaml")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--cap", type=int, default=400, help="evaluations before a search gives up")
    parser.add_argument("--within", type=float, default=0.02)
    parser.add_argument("--only", nargs="*", help="these strategies (the ratios need all of them)")
    args = parser.parse_args()
    space = load_space(Path(args.space))
    optimum = best_config(space).value
    target = optimum * (1 - args.within)
    print(f"{args.space}: optimum {optimum:.2f}, target {target:.2f} (within {args.within:.0%}); "
          f"cap {args.cap} evaluations; {args.seeds} seeds")
    print("| strategy | median evaluations to target | reached | median crashing evaluations before target |")
    print("|---|---|---|---|")
    medians = {}
    for name, make in strategies(space, space.budget.trials).items():
        if args.only and name not in args.only:
            continue
        needed, crashes = [], []
        for seed in range(1 if name == "grid" else args.seeds):
            sampler, crash_as_fail, use_seeds = make(seed)
            trace = simulate_search(space, sampler, args.cap, crash_as_fail, use_seeds)
            reached = evaluations_to_reach(trace, target)
            needed.append(reached if reached is not None else args.cap + 1)
            crashes.append(trace.crashes_before(reached) if reached else trace.crashes)
        medians[name] = statistics.median(needed)
        reached_count = sum(n <= args.cap for n in needed)
        shown = f"{medians[name]:.0f}" if medians[name] <= args.cap else f">{args.cap}"
        print(f"| {name} | {shown} | {reached_count}/{len(needed)} | {statistics.median(crashes):.0f} |")
    if {"sweeper default", "grid", "random"} - set(medians):
        return
    default = medians["sweeper default"]
    print(f"sweeper default / grid = {default / medians['grid']:.2f} (goal <= 0.25); "
          f"/ random = {default / medians['random']:.2f} (goal <= 0.60)")


if __name__ == "__main__":
    main()
