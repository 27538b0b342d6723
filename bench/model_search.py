"""A search driven by the simulator's performance MODEL instead of launched servers, with the
same plumbing as `sweeper sweep` (space suggestions, derived values, rules and constraints free,
duplicates free, failures recorded infeasible or FAIL): hundreds of searches run in minutes.
Any response surface of bench/surfaces.py can stand in for the model (noise included)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

from sweeper.spec.space import Space
from surfaces import Surface, sim
from sweeper.search.configs import config_key, suggest_config
from sweeper.spec.rules import excluded_by_rule, violated_constraints

optuna.logging.set_verbosity(optuna.logging.WARNING)


@dataclass
class SearchTrace:
    best_by_evaluation: list[float]  # best TRUE objective after each real evaluation (noise aside)
    crashed: list[bool]  # whether each real evaluation was of a config that fails
    reproposed_crashes: int = 0  # proposals of a config already seen to crash (free: deduped)
    study: optuna.Study | None = None  # what the search saw (noisy values), for what runs after it

    @property
    def crashes(self) -> int:
        return sum(self.crashed)

    def crashes_before(self, evaluation: int) -> int:
        return sum(self.crashed[:evaluation])


def simulate_search(space: Space, sampler: optuna.samplers.BaseSampler, evaluations: int,
                    crash_as_fail: bool = False, use_seeds: bool = True, surface: Surface | None = None,
                    noise_seed: int = 0, stop_at: float | None = None) -> SearchTrace:
    """Search `surface` (default: the simulator's model, noise-free) for up to `evaluations` real
    evaluations, or until the best true value reaches `stop_at`."""
    surface = surface or sim(space, noise=0.0)
    rng = random.Random(noise_seed)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    if use_seeds:
        for seed in space.seeds:
            study.enqueue_trial(seed.params, user_attrs={"seed": seed.name})
    seen: dict[str, tuple[float | None, float]] = {}
    trace = SearchTrace([], [], study=study)
    crashed_keys: set[str] = set()
    best, asked = 0.0, 0
    while len(trace.best_by_evaluation) < evaluations and asked < evaluations * 50:
        if stop_at is not None and best >= stop_at:
            break
        asked += 1
        trial = study.ask()
        config = suggest_config(trial, space)
        key = config_key(config)
        if key in seen:
            value, fault = seen[key]
            trace.reproposed_crashes += int(fault > 0 and value == 0.0 and key in crashed_keys)
        elif excluded_by_rule(space, config) or violated_constraints(space, config):
            value, fault = 0.0, 1.0
        else:
            measured = surface.measure(config, rng)
            value, fault = (measured, 0.0) if measured is not None else (0.0, 1.0)
            trace.crashed.append(measured is None)
            if measured is None:
                crashed_keys.add(key)
            best = max(best, surface.value(config) or 0.0)
            trace.best_by_evaluation.append(best)
        seen[key] = (value, fault)
        if fault and crash_as_fail:
            study.tell(trial, state=TrialState.FAIL)
        else:
            trial.set_constraint("config_fault", fault)
            study.tell(trial, value)
    return trace


def evaluations_to_reach(trace: SearchTrace, target: float) -> int | None:
    for index, best in enumerate(trace.best_by_evaluation, start=1):
        if best >= target:
            return index
    return None
