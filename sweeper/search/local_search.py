"""A structured local phase around a base sampler, as the case study searched by hand: from the
best config so far (the incumbent), change one lever at a time; when no single move helps, combine
the levers whose moves came closest; when those are spent too, let the base sampler explore.

Crash-aware: while every config measured has crashed, each trial is the config likeliest to run
(search/model.py's per-value crash odds) instead of TPE's, so that the climb gets a feasible start.

Noise-aware: a trial replaces the incumbent only when it beats it by more than `noise` (relative),
so a lucky measurement within the noise does not drag the climb sideways. Stateless between trials
(everything is read back from the study), so several workers and a resumed study climb alike.
Every trial gets a `proposed_by` user attr saying which strategy proposed it and why."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from typing import Any, Callable

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from sweeper.spec.rules import excluded_by_rule, violated_constraints
from sweeper.spec.space import Space
from sweeper.search.configs import Config, config_key, is_active, is_ordinal, lever_values, with_derived
from sweeper.search.model import crashed, is_feasible, propose

PROPOSED_BY = "proposed_by"


@dataclass(frozen=True)
class Move:
    params: Config  # the sampled (not derived) values of the proposed config
    why: str
    lever_value: tuple[str, Any] | None = None  # what a single-lever move changes


def moved_values(param, current: Any) -> list[Any]:
    """Other values of a lever in the order to try them: adjacent ones for an ordered lever."""
    values = lever_values(param)
    if current not in values:
        return values
    index = values.index(current)
    if is_ordinal(param):
        return [values[i] for i in (index + 1, index - 1) if 0 <= i < len(values)]
    return [v for v in values if v != current]


def completed(space: Space, changed: Config) -> Config:
    """The sampled values of a valid config: inactive levers dropped, newly active ones given
    the middle of their values."""
    config: Config = {}
    for name, param in space.parameters.items():
        if is_active(space, name, config):
            values = lever_values(param)
            config[name] = changed[name] if name in changed else values[len(values) // 2]
    return config


def climb(trials: list[FrozenTrial], noise: float, maximize: bool) -> list[FrozenTrial]:
    """The incumbents in order: each beats the one before by more than the noise."""
    path: list[FrozenTrial] = []
    for trial in sorted((t for t in trials if is_feasible(t)), key=lambda t: t.number):
        if not path:
            path.append(trial)
            continue
        best, value = path[-1].values[0], trial.values[0]
        margin = noise * abs(best)
        if (value > best + margin) if maximize else (value < best - margin):
            path.append(trial)
    return path


def single_lever(a: Config, b: Config) -> str | None:
    """The one lever two configs differ in (over the levers both have), if exactly one."""
    differing = [n for n in a if n in b and a[n] != b[n]]
    return differing[0] if len(differing) == 1 else None


class LocalSearchSampler(BaseSampler):
    """Seeds and `explore` exploring trials first; then moves from the incumbent, with every
    `explore_every`-th trial (0: none; 1: all) and every trial once the moves are spent exploring.
    An exploring trial is the `explorer`'s proposal (given the study and the configs taken) or,
    without one or when it has none, the base sampler's."""

    def __init__(self, space: Space, base: BaseSampler, explore: int = 4, noise: float = 0.02,
                 top_levers: int = 4, seed: int | None = None, explore_every: int = 2,
                 explorer: Callable[[optuna.Study, set[str]], Move | None] | None = None,
                 crash_aware: bool = True):
        self._space, self._base, self._explore = space, base, explore
        self._crash_aware = crash_aware  # while everything measured crashed: the likeliest to run
        self._every = explore_every  # > 0: every n-th trial explores anyway (a portfolio)
        self._explorer = explorer
        self._noise, self._top, self._seed = noise, top_levers, seed
        self._plans: dict[int, Config] = {}

    # ------------------------------------------------------------ Optuna's sampler protocol
    def reseed_rng(self) -> None:
        self._base.reseed_rng()

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        label = queued_label(trial)
        if label is None:
            move = None if self._every and trial.number % self._every == 0 else self.next_move(study)
            if move is None and self._crash_aware:
                move = self.feasible_start(study)
            if move is None and self._explorer is not None:
                move = self._explorer(study, self._taken_keys(study.get_trials(deepcopy=False)))
            if move is not None:
                self._plans[trial.number] = move.params
            label = move.why if move else "exploration"
        study._storage.set_trial_user_attr(trial._trial_id, PROPOSED_BY, label)
        self._base.before_trial(study, trial)

    def infer_relative_search_space(self, study, trial) -> dict[str, BaseDistribution]:
        if trial.number in self._plans:
            return {}
        return self._base.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space) -> dict[str, Any]:
        if trial.number in self._plans:
            return {}
        return self._base.sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution) -> Any:
        plan = self._plans.get(trial.number)
        if plan is not None and param_name in plan:
            return plan[param_name]
        return self._base.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study, trial, state, values) -> None:
        self._plans.pop(trial.number, None)
        self._base.after_trial(study, trial, state, values)

    # ------------------------------------------------------------ the local phase
    def next_move(self, study: optuna.Study) -> Move | None:
        """The next unmeasured, allowed config near the incumbent, or None (explore instead)."""
        if len(study.directions) > 1:
            return None
        trials = study.get_trials(deepcopy=False)
        done = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
        path = climb(done, self._noise, study.direction == optuna.study.StudyDirection.MAXIMIZE)
        if not path or len(done) < self._explore:
            return None
        taken = self._taken_keys(trials)
        incumbent = path[-1]
        helped = single_lever(path[-2].params, incumbent.params) if len(path) > 1 else None
        scores = move_scores(done)
        singles = list(self._single_moves(incumbent, helped))
        singles.sort(key=lambda m: -scores.get(m.lever_value, 0.0))  # stable: untried moves keep their order
        for move in itertools.chain(singles, self._combined_moves(incumbent, done)):
            full = with_derived(self._space, move.params)
            key = config_key(full)
            if key in taken or excluded_by_rule(self._space, full) or violated_constraints(self._space, full):
                continue
            return move
        return None

    def feasible_start(self, study: optuna.Study) -> Move | None:
        """While every config measured has crashed: the config likeliest to run (its values' crash
        odds from search/model.py), so that the climb has a feasible start."""
        if len(study.directions) > 1:
            return None
        trials = study.get_trials(deepcopy=False)
        done = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
        if any(is_feasible(t) for t in done) or not any(crashed(t) for t in done):
            return None
        proposal = propose(self._space, done, self._taken_keys(trials), True, f"{self._seed}-{len(trials)}")
        return None if proposal is None else Move(proposal.params, "feasible start: " + proposal.why.split("; ")[-1])

    def _taken_keys(self, trials: list[FrozenTrial]) -> set[str]:
        """Configs measured, running or queued (a failed one may be retried), and those planned for
        trials asked but not yet sampled (a worker asking twice before it suggests)."""
        keys = {config_key(with_derived(self._space, plan)) for plan in self._plans.values()}
        for t in trials:
            if t.state == TrialState.FAIL:
                continue
            params = t.params or t.system_attrs.get("fixed_params") or {}
            if params:
                keys.add(config_key(with_derived(self._space, params)))
        return keys

    def _single_moves(self, incumbent: FrozenTrial, helped: str | None):
        levers = [n for n in self._space.parameters if n in incumbent.params]
        random.Random(f"{self._seed}-{incumbent.number}").shuffle(levers)
        if helped in levers:  # the lever that just helped first: keep going that way
            levers.remove(helped)
            levers.insert(0, helped)
        for name in levers:
            for value in moved_values(self._space.parameters[name], incumbent.params[name]):
                params = completed(self._space, {**incumbent.params, name: value})
                yield Move(params, f"{name}={value} from trial {incumbent.number}", (name, value))

    def _combined_moves(self, incumbent: FrozenTrial, done: list[FrozenTrial]):
        """Pairs, then the triple, of the levers whose single moves came closest to the incumbent."""
        best_move: dict[str, FrozenTrial] = {}
        for t in done:
            lever = single_lever(incumbent.params, t.params)
            if lever and is_feasible(t) and (lever not in best_move or t.values[0] > best_move[lever].values[0]):
                best_move[lever] = t
        ranked = sorted(best_move, key=lambda n: -best_move[n].values[0])[:self._top]
        groups = list(itertools.combinations(ranked, 2)) + list(itertools.combinations(ranked[:3], 3))
        for group in groups:
            changed = {**incumbent.params, **{n: best_move[n].params[n] for n in group}}
            moved = ", ".join(f"{n}={best_move[n].params[n]}" for n in group)
            yield Move(completed(self._space, changed),
                       f"{moved} from trial {incumbent.number} (levers that came closest)")


def move_scores(done: list[FrozenTrial]) -> dict[tuple[str, Any], float]:
    """The mean relative change each (lever, value) move made from any feasible config it was
    tried from: -1 for a move into a crash. What hurt before is tried last (a crash region is left)."""
    feasible = [t for t in done if is_feasible(t)]
    deltas: dict[tuple[str, Any], list[float]] = {}
    for t in done:
        if t.state != TrialState.COMPLETE:
            continue
        for f in feasible:
            if f is t or (lever := single_lever(f.params, t.params)) is None:
                continue
            delta = (t.values[0] - f.values[0]) / abs(f.values[0] or 1) if is_feasible(t) else -1.0
            deltas.setdefault((lever, t.params[lever]), []).append(delta)
    return {move: sum(d) / len(d) for move, d in deltas.items()}


def queued_label(trial: FrozenTrial) -> str | None:
    """Why an enqueued trial runs: a seed, a retry, a re-check; None when the sampler proposes."""
    attrs = trial.user_attrs
    if "fixed_params" not in trial.system_attrs:
        return None
    if "retry_of" in attrs:
        return f"retry of trial {attrs['retry_of']}"
    if "seed" in attrs:
        return f"seed {attrs['seed']}"
    if attrs.get("measure_again"):
        return "re-check"
    return "queued"


def ensure_proposed_by(trial: optuna.Trial, sampler_name: str) -> None:
    """Label a trial that no local phase labelled (another sampler proposed it, or it was queued)."""
    if PROPOSED_BY not in trial.user_attrs:
        frozen = trial.study._storage.get_trial(trial._trial_id)  # Trial has no system attrs in 5.0
        trial.set_user_attr(PROPOSED_BY, queued_label(frozen) or f"{sampler_name} sampler")
