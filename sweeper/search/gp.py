"""Gaussian-process proposals for a categorical space (a local Bayesian optimisation, after
CASMOPOLITAN): a GP over log(objective) with an exponentiated Hamming kernel (one length per lever,
fitted by marginal likelihood), expected improvement (beyond one noise std) over the best posterior
mean among the measured configs, times the config's chance to run (a second GP, over ran/crashed).

Why a GP: the kernel is a product over levers, so it carries interactions an additive model cannot
(two levers that pay only together); its noise term makes the incumbent the best *estimate*, not
the luckiest measurement; fitted lengths tell the levers that matter from those that do not. The
candidates are the neighbours (one and two levers away) of the best estimated configs plus random
ones, so it climbs where it knows; where nothing stands out of the noise (a plateau) it spreads out,
balancing pairs of lever values.
bench/README.md (search_family.py) has the measurements that chose each piece.
Pure (numpy, scipy.optimize): the trials in, a config and why out."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
from optuna.trial import FrozenTrial
from scipy.optimize import minimize
from scipy.special import ndtr  # the normal CDF; scipy.stats would add 0.3 s to each sweep's start

from sweeper.spec.space import Space
from sweeper.search.configs import Config, config_key, is_ordinal, lever_values, with_derived
from sweeper.search.model import Proposal, crashed, is_feasible, neighbours, random_config
from sweeper.search.model import propose as likeliest
from sweeper.spec.rules import excluded_by_rule, violated_constraints

START = 5  # proposals by space-filling before the GP (with fewer measured configs than this)
MAX_ROWS = 200  # trials a fit uses (long studies: the best half and the latest)
MARGIN = 1.0  # an improvement counts beyond this many noise stds of one measurement
RANDOM_CANDIDATES = 300
PAIR_CANDIDATES = 300  # two-lever moves sampled around the best estimates
NOISE_BOUNDS = (0.005, 0.5)  # std of one measurement on log(objective): 0.5%..50%
NOISE_PRIOR = (math.log(0.03), 1.0)  # log-normal: a real launch's spread is 2-5%
# ran/crashed labels (+-1): a config's fate is nearly fixed. Up to 2.0, the fit called the one config
# that ran among 15 crashes noise (every config ~9% to run) and the search crashed 39 times of 40
RUNS_NOISE_PRIOR = (math.log(0.1), 1.0)
RUNS_NOISE_BOUNDS = (0.05, 0.3)
LENGTH_PRIOR = (math.log(3.0), 1.0)  # per lever, in units of one lever's full change
LENGTH_BOUNDS = (0.2, 50.0)


def _coordinates(space: Space, params: Config) -> np.ndarray:
    """One number per lever: its value's position in 0..1 (ordered levers) or index (others);
    NaN where the lever is inactive."""
    out = []
    for name, param in space.parameters.items():
        if name not in params:
            out.append(np.nan)
            continue
        values = lever_values(param)
        value = params[name]
        index = values.index(value) if value in values else min(
            range(len(values)), key=lambda i: abs(values[i] - value))
        out.append(index / max(1, len(values) - 1) if is_ordinal(param) else float(index))
    return np.array(out)


def _distances(space: Space, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-lever distances between rows of a and rows of b: shape (levers, len(a), len(b)).
    Ordered levers: the step apart (0..1); others 0 or 1; active against inactive: 1."""
    ordinal = np.array([is_ordinal(p) for p in space.parameters.values()])
    x, y = a.T[:, :, None], b.T[:, None, :]
    d = np.where(ordinal[:, None, None], np.abs(x - y), (x != y).astype(float))
    nan_x, nan_y = np.isnan(x), np.isnan(y)
    return np.where(nan_x & nan_y, 0.0, np.where(nan_x | nan_y, 1.0, d))


def _kernel(lengths: np.ndarray, signal: float, d: np.ndarray) -> np.ndarray:
    """The exponentiated Hamming kernel at per-lever distances d (levers, n, m)."""
    return signal ** 2 * np.exp(-np.tensordot(1 / lengths, d, axes=1))


@dataclass(frozen=True)
class GP:
    lengths: np.ndarray
    signal: float  # prior std of log(objective)
    noise: float
    offset: float
    x: np.ndarray
    alpha: np.ndarray
    chol: np.ndarray

    def predict(self, space: Space, coords: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean (log objective) and std of the true value at each row of coords."""
        k = _kernel(self.lengths, self.signal, _distances(space, coords, self.x))
        mean = self.offset + k @ self.alpha
        v = np.linalg.solve(self.chol, k.T)
        var = np.maximum(self.signal ** 2 - np.sum(v ** 2, axis=0), 1e-12)
        return mean, np.sqrt(var)


def _neg_log_posterior(theta: np.ndarray, d: np.ndarray, y: np.ndarray,
                       noise_prior: tuple[float, float] = NOISE_PRIOR) -> tuple[float, np.ndarray]:
    """-(log marginal likelihood + log priors) and its gradient over (log lengths, log signal, log noise)."""
    levers = d.shape[0]
    log_len, log_sig, log_noise = theta[:levers], theta[levers], theta[levers + 1]
    kf = np.exp(2 * log_sig - np.tensordot(np.exp(-log_len), d, axes=1))
    k = kf + np.exp(2 * log_noise) * np.eye(len(y))
    try:
        chol = np.linalg.cholesky(k)
    except np.linalg.LinAlgError:
        return 1e10, np.zeros_like(theta)
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, y))
    inv = np.linalg.solve(chol.T, np.linalg.solve(chol, np.eye(len(y))))
    nll = 0.5 * y @ alpha + np.sum(np.log(np.diag(chol)))
    outer = np.outer(alpha, alpha) - inv
    grad = np.empty_like(theta)
    for lever in range(levers):  # dK/dlog(length) = K_f * d / length
        grad[lever] = -0.5 * np.sum(outer * kf * d[lever]) * np.exp(-log_len[lever])
    grad[levers] = -0.5 * np.sum(outer * 2 * kf)
    grad[levers + 1] = -0.5 * np.trace(outer) * 2 * np.exp(2 * log_noise)
    mu_l, sd_l = LENGTH_PRIOR
    mu_n, sd_n = noise_prior
    nll += np.sum((log_len - mu_l) ** 2) / (2 * sd_l ** 2) + (log_noise - mu_n) ** 2 / (2 * sd_n ** 2)
    grad[:levers] += (log_len - mu_l) / sd_l ** 2
    grad[levers + 1] += (log_noise - mu_n) / sd_n ** 2
    return float(nll), grad


def _fit(space: Space, x: np.ndarray, y: np.ndarray, noise_prior: tuple[float, float],
         noise_bounds: tuple[float, float]) -> GP:
    """A GP of y at the configs x, its lengths, signal and noise at the posterior's mode."""
    offset = float(y.mean())
    y = y - offset
    d = _distances(space, x, x)
    levers = d.shape[0]
    spread = max(float(np.std(y)), 0.02)
    theta0 = np.concatenate([np.full(levers, LENGTH_PRIOR[0]), [math.log(spread), noise_prior[0]]])
    bounds = ([tuple(map(math.log, LENGTH_BOUNDS))] * levers
              + [(math.log(0.01), math.log(3.0)), tuple(map(math.log, noise_bounds))])
    result = minimize(_neg_log_posterior, theta0, args=(d, y, noise_prior), jac=True, method="L-BFGS-B",
                      bounds=bounds, options={"maxiter": 200})
    theta = result.x
    lengths, signal, noise = np.exp(theta[:levers]), math.exp(theta[levers]), math.exp(theta[levers + 1])
    k = _kernel(lengths, signal, d) + noise ** 2 * np.eye(len(y))
    chol = np.linalg.cholesky(k)
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, y))
    return GP(lengths, signal, noise, offset, x, alpha, chol)


def _capped(rows: list[FrozenTrial], merit: Callable[[FrozenTrial], float]) -> list[FrozenTrial]:
    """At most MAX_ROWS trials: half the best by merit, the rest the latest (where the search is).
    Why: a fit costs O(n^3); at 400 trials one proposal took ~5 s on a 2-core VM."""
    if len(rows) <= MAX_ROWS:
        return rows
    best = sorted(rows, key=merit, reverse=True)[:MAX_ROWS // 2]
    chosen = {t.number for t in best}
    latest = [t for t in sorted(rows, key=lambda t: -t.number) if t.number not in chosen][:MAX_ROWS - len(best)]
    return best + latest


def fit(space: Space, trials: Sequence[FrozenTrial], maximize: bool) -> GP | None:
    """The GP of the feasible trials' log(objective) (sign-flipped when minimising), or None before
    one ran."""
    rows = [t for t in trials if is_feasible(t) and t.values[0] > 0]
    if not rows:
        return None
    rows = _capped(rows, lambda t: t.values[0] * (1 if maximize else -1))
    x = np.array([_coordinates(space, t.params) for t in rows])
    y = np.log([t.values[0] for t in rows]) * (1 if maximize else -1)
    return _fit(space, x, y, NOISE_PRIOR, NOISE_BOUNDS)


def fit_runs(space: Space, trials: Sequence[FrozenTrial]) -> GP | None:
    """A GP of +1 (ran) / -1 (crashed) over the measured configs: crashes are often combinations
    (a backend with one parallel layout), which per-value odds miss; None before both were seen."""
    rows = _capped([t for t in trials if is_feasible(t) or crashed(t)], lambda t: float(is_feasible(t)))
    labels = np.array([1.0 if is_feasible(t) else -1.0 for t in rows])
    if len(set(labels)) < 2:
        return None
    x = np.array([_coordinates(space, t.params) for t in rows])
    return _fit(space, x, labels, RUNS_NOISE_PRIOR, RUNS_NOISE_BOUNDS)


def runs_chances(space: Space, model: GP | None, coords: np.ndarray) -> np.ndarray:
    """Each config's chance to run: the label GP's mean through a probit (the base rate far from
    anything measured)."""
    if model is None:
        return np.ones(len(coords))
    mean, _ = model.predict(space, coords)
    return np.clip(ndtr(1.5 * mean), 0.01, 1.0)


def _values_and_pairs(params: Config) -> list[tuple]:
    """A config's (lever, value) items, each alone and every two together."""
    items = sorted(params.items(), key=lambda item: item[0])
    return [(item,) for item in items] + [(a, b) for i, a in enumerate(items) for b in items[i + 1:]]


def _spread_out(space: Space, measured: Sequence[FrozenTrial], rng: random.Random, allowed,
                chance: Callable[[list[Config]], np.ndarray] | None = None) -> Config | None:
    """Space-filling over pairs of values (an orthogonal-array-like balance): of random allowed
    configs, the one that fills the most of what each lever pair's joint counts lack against an even
    spread (and each lever's), weighed by its chance to run once crashes taught one.
    Why pairs: crashes and gains are often combinations (a backend with a parallel layout); single
    values balanced alone once measured tp 2 eleven times and one backend eleven times, never
    together. 16 launches now measure 356 of the demo space's 470 value pairs (single values: 337,
    random configs: 320); on the surface family's outcomes the change is within noise (held-out
    seeds: 177 of 200 against 179; bench/README.md). Against an even spread: a pair of small levers
    (9 combinations) fills before a pair of large ones (32)."""
    sizes = {name: len(lever_values(param)) for name, param in space.parameters.items()}
    counts = Counter(key for t in measured for key in _values_and_pairs(t.params))
    configs = [params for params in (random_config(space, rng) for _ in range(100)) if allowed(params)]
    if not configs:
        return None

    def lack(params: Config) -> float:
        """How far below an even spread the config's values and value pairs were measured (a mean:
        a config with an inactive lever has fewer pairs)."""
        return float(np.mean([max(0.0, len(measured) / math.prod(sizes[name] for name, _ in key) - counts[key])
                              for key in _values_and_pairs(params)]))
    score = 1 + np.array([lack(p) for p in configs])
    if chance:
        score = score * chance(configs)
    return configs[int(np.argmax(score))]


def _candidates(space: Space, best: list[FrozenTrial], rng: random.Random, valid: Callable[[Config], bool],
                allowed: Callable[[Config], bool]) -> list[tuple[Config, str]]:
    """The configs the GP scores, each once and allowed: one- and two-lever moves around the best
    estimates, and random ones (why each is there, for its `proposed_by`)."""
    pool: list[tuple[Config, str]] = []
    for around in best:
        ones = neighbours(space, dict(around.params))
        pool += [(p, f"1 lever from trial {around.number}") for p in ones]
        # a move a constraint refuses (tp 2 under ep 4) with the second lever that makes it valid
        pool += [(q, f"2 levers from trial {around.number}") for p in ones if not valid(p)
                 for q in neighbours(space, p)]
        for _ in range(PAIR_CANDIDATES // 3):
            first = rng.choice(ones)
            pool.append((rng.choice(neighbours(space, first)), f"2 levers from trial {around.number}"))
    pool += [(random_config(space, rng), "exploration") for _ in range(RANDOM_CANDIDATES)]
    seen: set[str] = set()
    cands: list[tuple[Config, str]] = []
    for params, why in pool:
        key = config_key(with_derived(space, params))
        if key not in seen and allowed(params):
            seen.add(key)
            cands.append((params, why))
    return cands


def propose(space: Space, trials: Sequence[FrozenTrial], taken: set[str], maximize: bool,
            seed: Any) -> Proposal | None:
    """The allowed config not in `taken` (config keys) of the highest expected improvement times
    chance to run, or None when the candidates are all taken."""
    rng = random.Random(f"gp-{seed}")

    def valid(params: Config) -> bool:
        full = with_derived(space, params)
        return not (excluded_by_rule(space, full) or violated_constraints(space, full))

    def allowed(params: Config) -> bool:
        return valid(params) and config_key(with_derived(space, params)) not in taken

    measured = [t for t in trials if is_feasible(t) or crashed(t)]
    model = fit(space, trials, maximize) if len(measured) >= START else None
    if model is None:
        if len(measured) >= START and len(measured) % 2:  # all crashed: every other trial by crash odds
            found = likeliest(space, trials, taken, maximize, seed)
            if found is not None:
                return Proposal(found.params, "gp: nothing ran yet; " + found.why.split("; ")[-1])
        params = _spread_out(space, measured, rng, allowed)
        return None if params is None else Proposal(params, "gp: space-filling start")
    runs = fit_runs(space, trials)
    feasible = [t for t in trials if is_feasible(t) and t.values[0] > 0]
    if len(feasible) >= START and model.signal <= model.noise:  # nothing stands out (a plateau): spread out
        params = _spread_out(space, measured, rng, allowed,
                             lambda configs: runs_chances(space, runs, np.array([_coordinates(space, p) for p in configs])))
        if params is not None:
            return Proposal(params, f"gp: exploration (nothing stands out of the {model.noise:.1%} noise)")
    means, _ = model.predict(space, np.array([_coordinates(space, t.params) for t in feasible]))
    order = np.argsort(-means)
    incumbent, best_mean = feasible[int(order[0])], float(means[order[0]])
    cands = _candidates(space, [feasible[int(rank)] for rank in order[:3]], rng, valid, allowed)
    if not cands:
        return None
    mean, std = model.predict(space, np.array([_coordinates(space, p) for p, _ in cands]))
    # an improvement counts beyond the noise of one measurement: without the margin, moves of levers
    # that do not matter (a true change of ~0, a small std) win on the incumbent's noise
    # (with few configs that ran, the noise is the prior's guess: no margin, stay near what runs)
    gain = mean - best_mean - (MARGIN * model.noise if len(feasible) >= START else 0.0)
    z = gain / std
    ei = gain * ndtr(z) + std * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    chance = runs_chances(space, runs, np.array([_coordinates(space, p) for p, _ in cands]))
    score = ei * chance
    pick = int(np.argmax(score))
    params, why = cands[pick]
    return Proposal(params, f"gp: {why} (expected {math.expm1(mean[pick] - best_mean):+.1%} on trial "
                            f"{incumbent.number}'s estimate, {chance[pick]:.0%} to run)")
