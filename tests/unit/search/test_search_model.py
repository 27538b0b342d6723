"""The model-based search (sweeper/search/model.py, `--sampler model` / `hybrid`): the additive fit
recovers lever effects through noise, a crash is blamed on the values never seen running, and a
proposal is never a rule-excluded, constraint-violating or already-measured config."""

import random
import sys
import warnings

import optuna
import pytest
from optuna.trial import TrialState, create_trial
from optuna.distributions import CategoricalDistribution

from sweeper.search.configs import config_key, suggest_config, with_derived
from sweeper.search.local_search import PROPOSED_BY
from sweeper.search.model import bad_odds, fit, propose, runs_chance
from sweeper.search.samplers import build_sampler
from sweeper.spec.rules import excluded_by_rule, violated_constraints
from sweeper.spec.space_file import load_space
from tests.support.paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
warnings.filterwarnings("ignore")
optuna.logging.set_verbosity(optuna.logging.WARNING)

from model_search import evaluations_to_reach, simulate_search  # noqa: E402
from surfaces import optimum, sim  # noqa: E402

SPACE = load_space(ROOT / "search_spaces" / "demo-sim.yaml")


def _trial(params, value=None, crashed=False):
    dists = {n: CategoricalDistribution(sorted({v, *SPACE_VALUES[n]}, key=repr)) for n, v in params.items()}
    return create_trial(params=params, distributions=dists, value=0.0 if crashed else value,
                        state=TrialState.COMPLETE, system_attrs={"constraints": (1.0 if crashed else 0.0,)})


SPACE_VALUES = {"a": ["x", "y", "z"], "b": [1, 2]}


def _configs(rng, n):
    return [{"a": rng.choice(SPACE_VALUES["a"]), "b": rng.choice(SPACE_VALUES["b"])} for _ in range(n)]


@pytest.fixture
def tiny_space(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text("""\
name: tiny
engine: sim
model: m
parameters:
  a: {type: categorical, choices: [x, y, z], flag: --a}
  b: {type: categorical, choices: [1, 2], flag: --b}
constraints:
  - "not (a == 'z' and b == 2)"
budget: {trials: 6}
""")
    return load_space(path)


def test_the_fit_recovers_lever_effects_through_five_percent_noise(tiny_space):
    rng = random.Random(0)
    truth = {"x": 1.0, "y": 1.3, "z": 0.8}
    trials = [_trial(c, truth[c["a"]] * (1.1 if c["b"] == 2 else 1.0) * (1 + rng.gauss(0, 0.05)))
              for c in _configs(rng, 30)]
    model = fit(tiny_space, trials, maximize=True)
    effect = lambda a, b: model.predict(tiny_space, {"a": a, "b": b}, model.mean)  # noqa: E731
    assert effect("y", 1) > effect("x", 1) > effect("z", 1)
    assert effect("y", 2) - effect("y", 1) == pytest.approx(0.095, abs=0.05)  # log(1.1)
    assert 0.02 < model.noise < 0.09


def test_a_crash_is_blamed_on_the_value_never_seen_running(tiny_space):
    trials = [_trial({"a": "x", "b": 1}, 10.0), _trial({"a": "y", "b": 1}, 11.0),
              _trial({"a": "z", "b": 1}, crashed=True), _trial({"a": "x", "b": 2}, 10.5)]
    odds = bad_odds(tiny_space, trials)
    assert odds[("a", "z")] > 0.5 > odds[("a", "x")]
    assert runs_chance(tiny_space, {"a": "z", "b": 1}, odds) < 0.5 < runs_chance(tiny_space, {"a": "y", "b": 2}, odds)



def test_a_value_seen_only_in_crashes_looks_likelier_to_crash_than_an_untried_one():
    # Ten levers share each crash's blame: counting every crash whole made a value that crashed
    # again and again look safer than an untried one, and a feasible start never left the region.
    crashing = {**SPACE.seeds[0].params}
    trials = [create_trial(params=(p := {**crashing, "mem_fraction_static": mem}),
                           distributions={n: CategoricalDistribution([v]) for n, v in p.items()},
                           value=0.0, state=TrialState.COMPLETE, system_attrs={"constraints": (1.0,)})
              for mem in (0.6, 0.65, 0.7, 0.75, 0.8)]
    odds = bad_odds(SPACE, trials)
    assert odds[("tp_size", 8)] > odds[("tp_size", 2)], odds
    assert odds[("moe_runner_backend", "marlin")] > odds[("moe_runner_backend", "cutlass")], odds

def test_a_proposal_is_allowed_and_unmeasured(tiny_space):
    trials = [_trial({"a": "x", "b": 1}, 10.0), _trial({"a": "y", "b": 1}, 13.0), _trial({"a": "x", "b": 2}, 11.0)]
    taken = {config_key(with_derived(tiny_space, dict(t.params))) for t in trials}
    for seed in range(20):
        proposal = propose(tiny_space, trials, taken, True, seed)
        config = with_derived(tiny_space, proposal.params)
        assert config_key(config) not in taken and not violated_constraints(tiny_space, config)
        assert proposal.why.startswith("model: Thompson draw")
    everything = taken | {config_key(with_derived(tiny_space, c)) for c in ({"a": "y", "b": 2}, {"a": "z", "b": 1})}
    assert propose(tiny_space, trials, everything, True, 0) is None  # all allowed configs taken


def test_the_model_sampler_never_launches_an_excluded_or_measured_config_and_labels_each_trial():
    study = optuna.create_study(direction="maximize", sampler=build_sampler(SPACE, 30, "model", 3))
    for seed in SPACE.seeds:
        study.enqueue_trial(seed.params, user_attrs={"seed": seed.name})
    surface = sim(SPACE, noise=0.05)
    rng, keys = random.Random(1), []
    for _ in range(20):
        trial = study.ask()
        config = suggest_config(trial, SPACE)
        assert not excluded_by_rule(SPACE, config) and not violated_constraints(SPACE, config), config
        keys.append(config_key(config))
        value = surface.measure(config, rng)
        trial.set_constraint("config_fault", 0.0 if value is not None else 1.0)
        study.tell(trial, value or 0.0)
    assert len(keys) == len(set(keys))
    labels = [t.user_attrs[PROPOSED_BY] for t in study.trials]
    assert labels[0].startswith("seed ") and all(lab.startswith("model: ") for lab in labels[len(SPACE.seeds):])


def test_on_an_additive_surface_the_model_beats_random_search_under_noise():
    """The case it is for: lever effects that multiply, 5% noise per evaluation."""
    surface = sim(SPACE, noise=0.05)
    target = 0.98 * optimum(SPACE, surface)[0]
    reached = {name: [evaluations_to_reach(simulate_search(SPACE, make(seed), 30, surface=surface, noise_seed=seed,
                                                           stop_at=target), target) for seed in range(6)]
               for name, make in {"model": lambda s: build_sampler(SPACE, 30, "model", s),
                                  "random": lambda s: optuna.samplers.RandomSampler(seed=s)}.items()}
    inside = {name: sum(r is not None for r in runs) for name, runs in reached.items()}
    assert inside["model"] >= 5 and inside["model"] > inside["random"], reached
