"""How often does the demo's search land within 5% of the simulator's optimum?

Runs the study's own objective plumbing (sampler choice, seeds, constraints, dedupe by config key,
failures recorded as infeasible) against the simulator's performance MODEL instead of a launched
server, so many sampler seeds take seconds. Usage:

    python bench/demo_search.py [SPACE] [--seeds 20] [--trials N]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import optuna

from sweeper.spec.space_file import load_space
from sweeper.sim.best import best_config, modelled_objective
from sweeper.search.configs import config_key, suggest_config
from sweeper.spec.rules import violated_constraints
from sweeper.search.samplers import build_sampler

optuna.logging.set_verbosity(optuna.logging.WARNING)


def one_search(space, budget: int, seed: int) -> tuple[float, int]:
    """Best modelled objective found within `budget` evaluations, and the failed launches."""
    study = optuna.create_study(direction=space.objective.direction,
                                sampler=build_sampler(space, budget, "auto", seed))
    for s in space.seeds:
        study.enqueue_trial(s.params)
    seen: dict[str, tuple[float, float]] = {}
    evaluations, failures, best = 0, 0, 0.0
    while evaluations < budget:
        trial = study.ask()
        config = suggest_config(trial, space)
        key = config_key(config)
        if key in seen:
            value, fault = seen[key]
        elif violated_constraints(space, config):
            value, fault = 0.0, 1.0
        else:
            evaluations += 1
            modelled = modelled_objective(space, config)
            value, fault = (modelled, 0.0) if modelled is not None else (0.0, 1.0)
            failures += int(fault > 0)
            best = max(best, value)
        seen[key] = (value, fault)
        trial.set_constraint("config_fault", fault)
        study.tell(trial, value)
    return best, failures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("space", nargs="?", default="search_spaces/demo-sim.yaml")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument("--first-seed", type=int, default=0)
    args = parser.parse_args()
    space = load_space(Path(args.space))
    budget = args.trials or space.budget.trials
    optimum = best_config(space).value
    ratios, failures = [], []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        best, failed = one_search(space, budget, seed)
        ratios.append(best / optimum)
        failures.append(failed)
    within = sum(r >= 0.95 for r in ratios)
    print(f"{args.space}: budget {budget}, optimum {optimum:.2f} tok/s (modelled)")
    print(f"within 5% of the optimum: {within}/{args.seeds} seeds; "
          f"median best/optimum {statistics.median(ratios):.3f}, worst {min(ratios):.3f}; "
          f"failed launches per search: median {statistics.median(failures)}")


if __name__ == "__main__":
    main()
