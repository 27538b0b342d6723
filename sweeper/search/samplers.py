"""Which Optuna sampler a study uses: `auto` picks brute force when the discrete space is small
next to the budget, otherwise `gp` (search/gp.py: a Gaussian process over the levers, expected
improvement around the best estimates times a learnt chance to run).
`local` (search/local_search.py: single-lever moves from the incumbent, then pairs, interleaved with TPE)
was `auto` before the GP; `tpe` is plain multivariate TPE (the default before issue 20; not grouped:
on the demo space grouping by the conditional branches needed 25 evaluations to get within 2% of
the optimum against 14 without). bench/README.md has the numbers on a family of surfaces: the GP
reached 2% of the optimum inside 36 evaluations in 186 of 200 seed-runs (at least 17 of 20 on every
surface), `local` in 105, `tpe` in 82."""

from __future__ import annotations

import warnings
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from sweeper.spec.space import Space
from sweeper.search.configs import count_configs, enumerate_configs, parameter_values
from sweeper.search.local_search import LocalSearchSampler, Move
from sweeper.search.model import propose as thompson_draw

SAMPLERS = ("auto", "gp", "model", "hybrid", "local", "tpe", "brute", "random", "grid")
_COUNT_LIMIT = 200_000  # enumerate a space to count it only below this many raw combinations


class QueueAwareBruteForceSampler(optuna.samplers.BruteForceSampler):
    """Optuna's brute force, except that it never stops a study whose queue holds trials. Optuna's
    counts a failed trial's config as explored and stops the study once every config is: the queued
    retry of an infrastructure fault (a port taken after the preflight) on the grid's last config
    never ran, and a one-config sweep ended "nothing measured" (seen in a parallel test run)."""

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: list[float] | None) -> None:
        if not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            super().after_trial(study, trial, state, values)


class GridOrderSampler(BaseSampler):
    """Configs in the order a Cartesian sweep takes them (the `vllm bench sweep` baseline):
    trial n gets the n-th config of the space's enumeration."""

    def __init__(self, space: Space):
        self._configs = list(enumerate_configs(space))

    def infer_relative_search_space(self, study, trial) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study, trial, search_space) -> dict[str, Any]:
        return {}

    def sample_independent(self, study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        config = self._configs[trial.number % len(self._configs)]
        return config[param_name]


def model_explorer(space: Space, seed: int | None, propose=None):
    """Exploration by `propose` (default: a Thompson draw of search/model.py's additive model) of
    every trial so far."""
    def explore(study: optuna.Study, taken: set[str]) -> Move | None:
        proposer = propose or thompson_draw
        if len(study.directions) > 1:
            return None
        trials = study.get_trials(deepcopy=False)
        done = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
        maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
        proposal = proposer(space, done, taken, maximize, f"{seed}-{len(trials)}")
        return None if proposal is None else Move(proposal.params, proposal.why)
    return explore


def raw_size(space: Space) -> float:
    size = 1.0
    for param in space.parameters.values():
        try:
            size *= len(parameter_values(param))
        except ValueError:
            return float("inf")
    return size


def resolve_sampler_name(space: Space, budget: int, name: str) -> str:
    if name != "auto":
        return name
    size = count_configs(space) if raw_size(space) <= _COUNT_LIMIT else None
    return "brute" if size is not None and size <= 3 * budget else "gp"


def build_sampler(space: Space, budget: int, name: str = "auto", seed: int | None = None) -> BaseSampler:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", FutureWarning)
        match resolve_sampler_name(space, budget, name):
            case "brute":
                return QueueAwareBruteForceSampler(seed=seed)
            case "random":
                return optuna.samplers.RandomSampler(seed=seed)
            case "grid":
                return GridOrderSampler(space)
            case "local":
                return LocalSearchSampler(space, tpe_sampler(budget, seed), seed=seed)
            case "model":  # every trial the model's
                return LocalSearchSampler(space, tpe_sampler(budget, seed), explore=0, seed=seed, explore_every=1,
                                          explorer=model_explorer(space, seed))
            case "gp":  # every trial the GP's
                # lazy for CLI start-up only: gp.py brings scipy.optimize, 0.35 s of the 0.49 s its import takes (measured)
                from sweeper.search.gp import propose as gp_propose
                return LocalSearchSampler(space, tpe_sampler(budget, seed), explore=0, seed=seed, explore_every=1,
                                          explorer=model_explorer(space, seed, gp_propose), crash_aware=False)
            case "hybrid":  # the climb, its exploration slots the model's
                return LocalSearchSampler(space, tpe_sampler(budget, seed), seed=seed,
                                          explorer=model_explorer(space, seed))
            case _:
                return tpe_sampler(budget, seed)


def tpe_sampler(budget: int, seed: int | None) -> optuna.samplers.TPESampler:
    # Few startup trials: each evaluation costs minutes, and infeasible trials teach TPE too.
    # Constant liar: workers sharing a study do not all propose the same config.
    return optuna.samplers.TPESampler(multivariate=True, seed=seed, constant_liar=True,
                                      n_startup_trials=max(3, min(10, budget // 5)))
