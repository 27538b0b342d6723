"""The default search on large spaces (sweeper/search/gp.py, `auto` = `gp`): it climbs by moves of
one or two levers from its best estimate, its incumbent is an estimate and not the luckiest
measurement, it never launches a rule-excluded, measured or running config, and it leaves a crash
region behind."""

import random
import sys
import warnings

import numpy as np
import optuna
import pytest

from sweeper.search.configs import config_key, enumerate_configs, suggest_config
from sweeper.search.gp import _coordinates, fit, fit_runs, propose, runs_chances
from sweeper.search.local_search import PROPOSED_BY, is_feasible
from sweeper.search.model import neighbours, random_config
from sweeper.search.samplers import build_sampler, resolve_sampler_name
from sweeper.spec.rules import excluded_by_rule, violated_constraints
from sweeper.spec.space_file import load_space
from tests.support.paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
warnings.filterwarnings("ignore")
optuna.logging.set_verbosity(optuna.logging.WARNING)

from model_search import evaluations_to_reach, simulate_search  # noqa: E402
from surfaces import Surface, crash_island, interactions, optimum, sim  # noqa: E402

SPACE = load_space(ROOT / "search_spaces" / "demo-sim.yaml")


def _differing(a: dict, b: dict) -> int:
    return sum(a.get(n) != b.get(n) for n in set(a) | set(b))


def _tell(study, trial, value):
    trial.set_constraint("config_fault", 0.0 if value is not None else 1.0)
    study.tell(trial, value if value is not None else 0.0)


def test_auto_is_the_gp_on_a_large_space_and_brute_force_on_a_small_one(tmp_path):
    assert resolve_sampler_name(SPACE, 36, "auto") == "gp"
    small = tmp_path / "small.yaml"
    small.write_text("name: s\nengine: sim\nmodel: m\nparameters:\n"
                     "  a: {type: categorical, choices: [x, y, z], flag: --a}\nbudget: {trials: 6}\n")
    assert resolve_sampler_name(load_space(small), 6, "auto") == "brute"


def test_after_its_start_the_gp_moves_one_or_two_levers_from_its_best_estimate():
    surface = interactions(SPACE, noise=0.03)
    trace = simulate_search(SPACE, build_sampler(SPACE, 36, "gp", 2), 30, use_seeds=True, surface=surface)
    trials = trace.study.trials
    labels = [t.user_attrs[PROPOSED_BY] for t in trials]
    assert labels[:2] == ["seed case-study-baseline", "seed case-study-ep4"]
    assert labels[2].startswith("gp: space-filling start")
    moves = [t for t in trials if " from trial " in t.user_attrs[PROPOSED_BY]]
    assert len(moves) >= len(trials) // 2, labels  # a local search, mostly
    for t in moves:
        label = t.user_attrs[PROPOSED_BY]
        origin = trials[int(label.split(" from trial ")[1].split()[0])]
        levers = int(label.split("gp: ")[1][0])
        assert origin.number < t.number and is_feasible(origin)
        # a lever a change deactivates or activates (CUDA graphs off: no max batch) counts too
        assert 1 <= _differing(dict(origin.params), dict(t.params)) <= levers + 1, (label, origin.params, t.params)
        assert f"on trial {origin.number}'s estimate" in label or "on trial" in label


def test_the_incumbent_is_the_best_estimate_not_the_luckiest_measurement():
    """A config measured 5% above the best region, whose every neighbour measured ~15% lower, is a
    lucky measurement: the GP's incumbent is the config whose neighbourhood agrees it is good."""
    rng = random.Random(0)
    base = dict(SPACE.seeds[0].params)
    good = {**base, "nccl_proto": "LL"}
    lucky = {**base, "attention_backend": "torch_native", "nccl_proto": "LL128"}
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    truth = {}
    for around, level in ((good, 100.0), (lucky, 85.0)):
        for config in [around] + [c for c in neighbours(SPACE, around)
                                  if not violated_constraints(SPACE, c)][:10]:
            truth[config_key(config)] = (config, level * rng.uniform(0.98, 1.02))
    truth[config_key(lucky)] = (lucky, 105.0)  # its one lucky measurement
    for config, value in truth.values():
        study.enqueue_trial(config)
        trial = study.ask()
        suggest_config(trial, SPACE)
        _tell(study, trial, value)
    model = fit(SPACE, study.trials, True)
    numbers = {config_key(dict(t.params)): t.number for t in study.trials}
    estimate = dict(zip(numbers, model.predict(SPACE, np.array([_coordinates(SPACE, dict(t.params))
                                                                for t in study.trials]))[0]))
    assert estimate[config_key(good)] > estimate[config_key(lucky)]
    proposal = propose(SPACE, study.trials, set(numbers), True, 0)
    assert f"trial {numbers[config_key(good)]}'s estimate" in proposal.why, proposal.why


def test_no_excluded_measured_or_running_config_is_launched():
    """Two workers on one study: a config running on the other is not proposed again."""
    study = optuna.create_study(direction="maximize", sampler=build_sampler(SPACE, 36, "auto", 5))
    for seed in SPACE.seeds:
        study.enqueue_trial(seed.params, user_attrs={"seed": seed.name})
    surface, rng, keys = sim(SPACE, noise=0.03), random.Random(5), []
    for _ in range(15):
        pair = [study.ask(), study.ask()]  # both running before either is told
        for trial in pair:
            config = suggest_config(trial, SPACE)
            assert not excluded_by_rule(SPACE, config) and not violated_constraints(SPACE, config), config
            keys.append(config_key(config))
        for trial, key in zip(pair, keys[-2:]):
            _tell(study, trial, surface.measure(dict(trial.params), rng))
    assert len(keys) == len(set(keys)), "a config was launched twice"
    assert all(t.user_attrs[PROPOSED_BY].startswith(("seed ", "gp: ")) for t in study.trials)


def test_the_first_config_that_runs_among_crashes_makes_its_neighbours_likely_to_run():
    """One config ran, fifteen crashed: the config and its one-lever neighbours are likely to run
    and the crashed configs are not (a fit that calls the one success noise gives all ~9%)."""
    surface, rng = crash_island(SPACE), random.Random(3)
    study = optuna.create_study(direction="maximize")
    configs = [random_config(SPACE, rng) for _ in range(400)]
    crashing = [c for c in configs if surface.value(c) is None][:15]
    running = next(c for c in configs if surface.value(c) is not None)
    for config in crashing + [running]:
        study.enqueue_trial(config)
        trial = study.ask()
        _tell(study, trial, surface.value(suggest_config(trial, SPACE)))
    runs = fit_runs(SPACE, study.trials)

    def chance(configs):
        return runs_chances(SPACE, runs, np.array([_coordinates(SPACE, c) for c in configs]))
    assert chance([running])[0] > 0.8
    assert np.median(chance(neighbours(SPACE, running))) > 0.5
    assert chance(crashing).max() < 0.2


def _value_pairs(configs) -> set:
    pairs = set()
    for config in configs:
        items = sorted((name, value) for name, value in config.items() if name in SPACE.parameters)
        pairs |= {(a, b) for i, a in enumerate(items) for b in items[i + 1:]}
    return pairs


def test_while_nothing_runs_the_search_measures_more_value_pairs_than_random_configs():
    """Crashes are often combinations (a backend with a parallel layout), so until a config runs
    the proposals balance each lever pair's joint values: 16 crashing launches measure more value
    pairs than 16 random allowed configs (single values balanced alone: 337 against 320 of 470)."""
    everything_crashes = Surface("everything crashes", lambda config: None, 0.0)
    allowed = [c for c in enumerate_configs(SPACE)
               if not excluded_by_rule(SPACE, c) and not violated_constraints(SPACE, c)]
    rng = random.Random(0)
    at_random = np.mean([len(_value_pairs(rng.sample(allowed, 16))) for _ in range(20)])
    measured = [len(_value_pairs(dict(t.params) for t in simulate_search(
                    SPACE, build_sampler(SPACE, 36, "gp", seed), 16, use_seeds=False,
                    surface=everything_crashes).study.trials))
                for seed in range(4)]
    assert np.mean(measured) > 1.08 * at_random, (measured, at_random)


@pytest.mark.parametrize("surface, seed", [(crash_island(SPACE), 1), (sim(SPACE), 2)], ids=["crash_island", "sim"])
def test_a_crash_region_is_left(surface, seed):
    """crash_island: 93% of the space crashes, a feasible island of three levers; sim: 90% crashes
    by the simulator's failure rules, here without the space's seeds (seed 2 once crashed 39 of 40)."""
    trace = simulate_search(SPACE, build_sampler(SPACE, 36, "gp", seed), 40, use_seeds=False, surface=surface)
    first_feasible = trace.crashed.index(False)
    later = trace.crashed[first_feasible + 1:]
    # random search crashes in 90-93% of its launches here; a search that left the region, in at most half
    assert len(later) >= 10 and sum(later) <= len(later) // 2, trace.crashed
    # the learnt chance to run: the measured crashes' neighbours look likelier to crash than the
    # feasible configs' neighbours
    trials = trace.study.trials
    runs = fit_runs(SPACE, trials)
    near = {kind: [c for t in trials if (is_feasible(t) if kind == "ok" else not is_feasible(t))
                   for c in neighbours(SPACE, dict(t.params))] for kind in ("ok", "crash")}
    chance = {kind: runs_chances(SPACE, runs, np.array([_coordinates(SPACE, c) for c in configs])).mean()
              for kind, configs in near.items()}
    assert chance["ok"] > 2 * chance["crash"], chance


def test_where_two_levers_pay_only_together_the_gp_beats_the_tpe_default():
    """The interactions surface (bench/surfaces.py): a pair and a triple that pay only together."""
    surface = interactions(SPACE, seed=12)
    target = 0.98 * optimum(SPACE, surface)[0]
    reached = {name: [evaluations_to_reach(simulate_search(SPACE, build_sampler(SPACE, 36, name, seed), 36,
                                                           surface=surface, noise_seed=seed, stop_at=target),
                                           target) for seed in range(5)]
               for name in ("gp", "tpe")}
    inside = {name: sum(r is not None for r in runs) for name, runs in reached.items()}
    assert inside["gp"] >= 4 and inside["gp"] > inside["tpe"], reached


def test_a_long_study_fits_on_its_best_and_its_latest_trials():
    from optuna.trial import TrialState, create_trial
    from sweeper.search.gp import MAX_ROWS, _capped
    rows = [create_trial(params={}, distributions={}, value=float(n % 7), state=TrialState.COMPLETE)
            for n in range(3 * MAX_ROWS)]
    for n, t in enumerate(rows):
        t.number = n
    kept = _capped(rows, lambda t: t.values[0])
    assert len(kept) == MAX_ROWS and len({t.number for t in kept}) == MAX_ROWS
    numbers = {t.number for t in kept}
    assert all(t.number in numbers for t in rows if t.values[0] == 6.0)  # the best
    assert {t.number for t in rows[-MAX_ROWS // 4:]} <= numbers  # and the latest
    assert _capped(rows[:10], lambda t: t.values[0]) == rows[:10]
