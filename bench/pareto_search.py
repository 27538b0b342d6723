"""Search efficiency of the two-objective (Pareto) mode on the simulator's response surface.

The space's objectives become output tok/s at the highest level (maximised) and a latency at the
lowest level (minimised); every config is evaluated through the simulator's pure performance model
and failure rules (no servers), with the same plumbing as `sweeper sweep`: rules and constraints
free and infeasible, crashes infeasible, duplicates free. For each strategy and seed: the number of
real evaluations until the hypervolume of the feasible configs found reaches 99% of the exact
front's (reference point: 0 tok/s and the worst feasible latency), and the evaluations spent on
crashing configs by then.

    python bench/pareto_search.py [SPACE] [--latency median_itl_ms] [--seeds 20] [--cap 300]
"""

from __future__ import annotations

import argparse
import statistics
import warnings
from pathlib import Path

import optuna

from sweeper.spec.space import ObjectiveTerm, Space
from sweeper.spec.space_file import load_space
from sweeper.search.samplers import GridOrderSampler, build_sampler
from sweeper.sim.best import modelled_front, modelled_pair
from sweeper.search.configs import config_key, enumerate_configs, suggest_config
from sweeper.spec.rules import excluded_by_rule, violated_constraints

warnings.filterwarnings("ignore")
optuna.logging.set_verbosity(optuna.logging.WARNING)
LATENCY = ("median_itl_ms", "median_ttft_ms", "median_e2e_latency_ms")


def pareto_space(space: Space, latency: str) -> Space:
    """The space with the Pareto pair instead of its single objective."""
    return space.model_copy(update={"objectives": [ObjectiveTerm(metric="output_throughput"),
                                                   ObjectiveTerm(metric=latency)]})


def hypervolume(points: list[tuple[float, float]], worst_latency: float) -> float:
    """Area dominated by the points (tok/s up, latency down) above 0 tok/s and left of
    worst_latency: from each point's latency to the next, the best tok/s reached so far."""
    area, best = 0.0, 0.0
    ordered = sorted((p for p in points if p[1] < worst_latency), key=lambda p: p[1])
    for (tok_s, latency), nxt in zip(ordered, [p[1] for p in ordered[1:]] + [worst_latency]):
        best = max(best, tok_s)
        area += best * (nxt - latency)
    return area


def search(space: Space, sampler, cap: int, use_seeds: bool, worst: float, target: float) -> tuple[int | None, int]:
    """(evaluations to reach the target hypervolume or None, crashing evaluations by then)."""
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    for seed in space.seeds if use_seeds else ():
        study.enqueue_trial(seed.params)
    seen: dict[str, tuple[float, float, float]] = {}
    found: list[tuple[float, float]] = []
    evaluations = crashes = asked = 0
    while evaluations < cap and asked < cap * 50:
        asked += 1
        trial = study.ask()
        config = suggest_config(trial, space)
        key = config_key(config)
        if key not in seen:
            pair = modelled_pair(space, config)
            if not (excluded_by_rule(space, config) or violated_constraints(space, config)):  # a launch
                evaluations += 1
                crashes += pair is None
            seen[key] = (*pair, 0.0) if pair else (0.0, 1e12, 1.0)
            if pair:
                found.append(pair)
                if hypervolume(found, worst) >= target:
                    return evaluations, crashes
        tok_s, latency, fault = seen[key]
        trial.set_constraint("config_fault", fault)
        study.tell(trial, [tok_s, latency])
    return None, crashes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("space", nargs="?", default="search_spaces/demo-sim.yaml")
    parser.add_argument("--latency", choices=LATENCY, default="median_itl_ms")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--cap", type=int, default=300, help="evaluations before a search gives up")
    parser.add_argument("--within", type=float, default=0.01)
    args = parser.parse_args()
    space = pareto_space(load_space(Path(args.space)), args.latency)
    pairs = [p for c in enumerate_configs(space) if (p := modelled_pair(space, c)) is not None]
    front, feasible, total = modelled_front(space)
    worst = max(p[1] for p in pairs) * 1.05
    target = hypervolume(pairs, worst) * (1 - args.within)
    names = " and ".join(g.name for g in space.goals)
    points = len({(p.throughput, p.latency) for p in front})
    print(f"{args.space}: {names}; {feasible} feasible of {total} configs; the exact front has {points} points "
          f"({len(front)} configs); target {1 - args.within:.0%} of its hypervolume; cap {args.cap}; {args.seeds} seeds")
    strategies = {
        "grid": lambda seed: (GridOrderSampler(space), False),
        "random": lambda seed: (optuna.samplers.RandomSampler(seed=seed), False),
        "NSGA-II": lambda seed: (optuna.samplers.NSGAIISampler(seed=seed, population_size=20), False),
        "sweeper default": lambda seed: (build_sampler(space, space.budget.trials, "auto", seed), True),
    }
    print("| strategy | median evaluations to target | reached | median crashing evaluations before target |")
    print("|---|---|---|---|")
    for name, make in strategies.items():
        needed, crashed = [], []
        for seed in range(1 if name == "grid" else args.seeds):
            sampler, use_seeds = make(seed)
            reached, crashes = search(space, sampler, args.cap, use_seeds, worst, target)
            needed.append(reached if reached is not None else args.cap + 1)
            crashed.append(crashes)
        median = statistics.median(needed)
        shown = f"{median:.0f}" if median <= args.cap else f">{args.cap}"
        print(f"| {name} | {shown} | {sum(n <= args.cap for n in needed)}/{len(needed)} | "
              f"{statistics.median(crashed):.0f} |", flush=True)


if __name__ == "__main__":
    main()
