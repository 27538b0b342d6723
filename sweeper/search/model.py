"""Model-based proposals under noise: an additive model of log(objective) over one-hot lever
values, fitted to every feasible trial (Bayesian ridge), and a per-value crash model; a proposal is
a Thompson draw: sample the lever effects from the posterior and take the allowed, unmeasured
config that maximises the draw's value times its chance to run.

Why: one measurement of a real GPU varies by ~5% between launches, as much as most single-lever
gains, so a climb that compares each move with the incumbent is led by noise; pooling every trial
estimates each lever value's effect from all configs that have it. Pure (numpy only): the trials
in, a config and why out."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from optuna.trial import FrozenTrial, TrialState

from sweeper.spec.space import Space
from sweeper.search.configs import Config, config_key, is_active, lever_values, with_derived
from sweeper.spec.rules import excluded_by_rule, violated_constraints

EFFECT_PRIOR = 0.3  # prior std of one lever value's effect on log(objective): +-30%
NOISE_FLOOR = 0.03  # the smallest noise the fit assumes (relative): a real launch's spread is 2-5%
EXPLORE = 1.0  # scale of the posterior's covariance in a draw
CANDIDATES = 400  # random allowed configs scored per proposal, besides the neighbours of the best
# A value never seen in a feasible config: prior odds of being the cause of a crash (Beta(a, b))
BAD_PRIOR_A, BAD_PRIOR_B = 0.3, 1.0
SAFE_BAD = 0.03  # a value seen running may still crash in some combination (pair rules)

Item = tuple[str, Any]


def is_feasible(trial: FrozenTrial) -> bool:
    return (trial.state == TrialState.COMPLETE and trial.values is not None
            and all(v <= 0 for v in (trial.constraints or {}).values()))


def _item(space: Space, name: str, value: Any) -> Item:
    """A lever value as a model feature (a stepless float snaps to the nearest of its nine points)."""
    values = lever_values(space.parameters[name])
    if value in values or not isinstance(value, (int, float)):
        return name, value
    return name, min(values, key=lambda v: abs(v - value))


def _items(space: Space, params: Config) -> list[Item]:
    return [_item(space, n, v) for n, v in params.items() if n in space.parameters]


def crashed(trial: FrozenTrial) -> bool:
    """Measured and failed through the config's fault (what the sweep records as infeasible)."""
    return trial.state == TrialState.COMPLETE and not is_feasible(trial) and bool(trial.params)


@dataclass(frozen=True)
class Fit:
    columns: dict[Item, int]
    mean: np.ndarray
    cov: np.ndarray
    offset: float  # mean log(objective) of the feasible trials
    noise: float

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        return rng.multivariate_normal(self.mean, self.cov * EXPLORE, method="cholesky")

    def predict(self, space: Space, params: Config, coef: np.ndarray) -> float:
        return self.offset + sum(coef[self.columns[i]] for i in _items(space, params) if i in self.columns)


def fit(space: Space, trials: Sequence[FrozenTrial], maximize: bool) -> Fit | None:
    """The additive model of the feasible trials' log(objective) (sign-flipped when minimising), or
    None with fewer than two feasible trials."""
    rows = [t for t in trials if is_feasible(t) and t.values[0] > 0]
    if len(rows) < 2:
        return None
    columns = {item: i for i, item in enumerate(sorted({i for t in rows for i in _items(space, t.params)}, key=repr))}
    x = np.zeros((len(rows), len(columns)))
    for r, t in enumerate(rows):
        for item in _items(space, t.params):
            x[r, columns[item]] = 1.0
    y = np.log([t.values[0] for t in rows]) * (1 if maximize else -1)
    offset = float(y.mean())
    # noise: the residual of a first fit, never below the floor (few trials fit themselves)
    noise = NOISE_FLOOR
    for _ in range(2):
        precision = x.T @ x / noise ** 2 + np.eye(len(columns)) / EFFECT_PRIOR ** 2
        cov = np.linalg.inv(precision)
        mean = cov @ x.T @ (y - offset) / noise ** 2
        dof = max(1, len(rows) - len(columns) // 2)
        noise = max(NOISE_FLOOR, float(np.sqrt(np.sum((y - offset - x @ mean) ** 2) / dof)))
    return Fit(columns, mean, (cov + cov.T) / 2, offset, noise)


def bad_odds(space: Space, trials: Sequence[FrozenTrial]) -> dict[Item, float]:
    """Each lever value's chance of crashing a config. A crash is blamed on the values of its config
    never seen running (shared equally); a value seen running keeps a small chance (combinations)."""
    safe = {i for t in trials if is_feasible(t) for i in _items(space, t.params)}
    blame: dict[Item, float] = {}
    tried: dict[Item, float] = {}
    for t in trials:
        items = _items(space, t.params)
        if is_feasible(t):
            for i in items:
                tried[i] = tried.get(i, 0) + 1
        elif crashed(t):
            # a crash is evidence against each suspect in the share it is blamed: counted whole in
            # `tried`, a value seen only in crashes would look safer with every crash than untried
            suspects = [i for i in items if i not in safe] or items
            for i in suspects:
                blame[i] = blame.get(i, 0.0) + 1 / len(suspects)
                tried[i] = tried.get(i, 0) + 1 / len(suspects)
    odds = {}
    for name, param in space.parameters.items():
        for value in lever_values(param):
            i = (name, value)
            b = (blame.get(i, 0.0) + BAD_PRIOR_A) / (tried.get(i, 0) + BAD_PRIOR_A + BAD_PRIOR_B)
            odds[i] = min(b, SAFE_BAD) if i in safe else b
    return odds


def runs_chance(space: Space, params: Config, odds: dict[Item, float]) -> float:
    return math.prod(1 - odds.get(i, 0.0) for i in _items(space, params))


def random_config(space: Space, rng: random.Random) -> Config:
    config: Config = {}
    for name, param in space.parameters.items():
        if is_active(space, name, config):
            config[name] = rng.choice(lever_values(param))
    return config


def neighbours(space: Space, params: Config) -> list[Config]:
    """Every config one lever value away (levers a change activates get each of their values)."""
    out = []
    for name in params:
        for value in lever_values(space.parameters[name]):
            if value == params[name]:
                continue
            changed = {**params, name: value}
            config: Config = {}
            for n in space.parameters:
                if is_active(space, n, config):
                    config[n] = changed.get(n, lever_values(space.parameters[n])[0])
            out.append(config)
    return out


@dataclass(frozen=True)
class Proposal:
    params: Config
    why: str


def propose(space: Space, trials: Sequence[FrozenTrial], taken: set[str], maximize: bool,
            seed: Any) -> Proposal | None:
    """The Thompson draw's best allowed config not in `taken` (config keys), or None when the
    candidates are all taken."""
    rng = random.Random(f"model-{seed}")
    model = fit(space, trials, maximize)
    odds = bad_odds(space, trials)
    best_known = sorted((t for t in trials if is_feasible(t)), key=lambda t: -t.values[0] if maximize else t.values[0])
    pool: list[Config] = [random_config(space, rng) for _ in range(CANDIDATES)]
    if model is not None:  # around the model's best measured configs, where the gains are
        ranked = sorted(best_known, key=lambda t: -model.predict(space, t.params, model.mean))
        for t in ranked[:3]:
            pool.extend(neighbours(space, dict(t.params)))
    coef = model.draw(np.random.default_rng(rng.getrandbits(32))) if model is not None else None
    best: tuple[float, Config] | None = None
    seen: set[str] = set()
    for params in pool:
        full = with_derived(space, params)
        key = config_key(full)
        if key in seen or key in taken or excluded_by_rule(space, full) or violated_constraints(space, full):
            continue
        seen.add(key)
        chance = runs_chance(space, params, odds)
        gain = math.exp(model.predict(space, params, coef) - model.offset) if coef is not None else 1.0
        # before anything ran, prefer configs of values tried least (chance alone would repeat them)
        score = chance * gain * (1 + rng.random() * 1e-6)
        if best is None or score > best[0]:
            best = (score, params)
    if best is None:
        return None
    score, params = best
    if model is None:
        return Proposal(params, f"model: nothing feasible to fit yet; likeliest to run ({score:.0%})")
    expected = model.predict(space, params, model.mean) - model.offset
    return Proposal(params, f"model: Thompson draw (expected {math.expm1(expected):+.0%} on the mean, "
                            f"{runs_chance(space, params, odds):.0%} to run)")
