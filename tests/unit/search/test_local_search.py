"""The local phase of the default search (sweeper/search/local_search.py): single-lever moves from the
incumbent, never a rule-excluded or already-measured config, and a crash region is left."""

import sys
import warnings

import optuna

from sweeper.search.configs import config_key, suggest_config
from sweeper.search.local_search import PROPOSED_BY, LocalSearchSampler, is_feasible, single_lever
from sweeper.spec.rules import excluded_by_rule, violated_constraints
from sweeper.spec.space_file import load_space
from tests.support.paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
warnings.filterwarnings("ignore")
optuna.logging.set_verbosity(optuna.logging.WARNING)

from surfaces import crash_island  # noqa: E402
from model_search import simulate_search  # noqa: E402

SPACE = load_space(ROOT / "search_spaces" / "demo-sim.yaml")


def _local(seed=0, explore=2):
    # explore_every=0: the local phase alone (the default interleaves the base sampler)
    return LocalSearchSampler(SPACE, optuna.samplers.RandomSampler(seed=seed), explore=explore, seed=seed,
                              explore_every=0)


def _run(study, value_of, trials):
    """Ask/tell as the sweep does: a rule-excluded config is recorded infeasible without a launch."""
    launched = []
    for _ in range(trials):
        trial = study.ask()
        config = suggest_config(trial, SPACE)
        if excluded_by_rule(SPACE, config) or violated_constraints(SPACE, config):
            trial.set_constraint("config_fault", 1.0)
            study.tell(trial, 0.0)
            continue
        launched.append((trial.number, config))
        value = value_of(config)
        trial.set_constraint("config_fault", 0.0 if value is not None else 1.0)
        study.tell(trial, value if value is not None else 0.0)
    return launched


def test_moves_change_one_lever_of_the_incumbent():
    study = optuna.create_study(direction="maximize", sampler=_local())
    seed = SPACE.seeds[0].params
    study.enqueue_trial(seed, user_attrs={"seed": "baseline"})
    study.enqueue_trial({**seed, "nccl_proto": "LL"})  # a second trial: past the exploration
    _run(study, lambda c: 10.0, 8)  # a flat surface: the seed stays the incumbent
    moves = [t for t in study.trials if "from trial 0" in t.user_attrs[PROPOSED_BY]]
    assert len(moves) >= 5
    for t in moves:
        assert single_lever(study.trials[0].params, t.params) is not None, t.params
    assert study.trials[0].user_attrs[PROPOSED_BY] == "seed baseline"


def test_moves_follow_an_improvement():
    study = optuna.create_study(direction="maximize", sampler=_local(explore=1))
    study.enqueue_trial(SPACE.seeds[0].params)
    _run(study, lambda c: 10.0 + 5 * (c["nccl_proto"] == "LL"), 25)
    labels = [t.user_attrs[PROPOSED_BY] for t in study.trials]
    improved = labels.index("nccl_proto=LL from trial 0")
    assert all(f"from trial {improved}" in label for label in labels[improved + 1:]), labels


def test_no_excluded_or_measured_config_is_launched():
    study = optuna.create_study(direction="maximize", sampler=_local(explore=1))
    study.enqueue_trial(SPACE.seeds[0].params)
    launched = _run(study, lambda c: 10.0 + c["tp_size"], 40)
    local = [(n, c) for n, c in launched if "from trial" in study.trials[n].user_attrs[PROPOSED_BY]]
    assert local
    keys = [config_key(c) for _, c in local]
    assert len(keys) == len(set(keys))
    earlier = set()
    for number, config in launched:
        key = config_key(config)
        if "from trial" in study.trials[number].user_attrs[PROPOSED_BY]:
            assert key not in earlier
            assert not excluded_by_rule(SPACE, config) and not violated_constraints(SPACE, config)
        earlier.add(key)


def test_a_crash_region_is_left():
    surface = crash_island(SPACE)
    trace = simulate_search(SPACE, _local(seed=1, explore=4), 60, use_seeds=False, surface=surface)
    # Once on the island, the local moves leave the crash region behind: few of them crash late in
    # the search (TPE's exploring trials, once the moves are spent, may still land off the island).
    first_feasible = trace.crashed.index(False)
    local = [not is_feasible(t) for t in trace.study.trials[first_feasible + 20:]
             if " from trial " in t.user_attrs[PROPOSED_BY]]
    assert local and sum(local) <= len(local) // 2, trace.crashed


def test_a_feasible_start_is_sought_while_everything_crashed():
    surface = crash_island(SPACE)
    trace = simulate_search(SPACE, _local(seed=1, explore=4), 20, use_seeds=True, surface=surface)
    labels = [t.user_attrs[PROPOSED_BY] for t in trace.study.trials]
    first_feasible = trace.crashed.index(False)  # found inside 20 evaluations (seeds crash here)
    assert all(lab.startswith(("seed", "feasible start", "exploration")) for lab in labels[:first_feasible + 1])
    assert any(lab.startswith("feasible start") for lab in labels[:first_feasible + 1]), labels
    assert not any(lab.startswith("feasible start") for lab in labels[first_feasible + 1:]), labels


def test_every_sampler_labels_its_trials():
    from sweeper.search.local_search import ensure_proposed_by
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    study.enqueue_trial(SPACE.seeds[0].params, user_attrs={"seed": "baseline"})
    for _ in range(2):
        trial = study.ask()
        ensure_proposed_by(trial, "random")
        study.tell(trial, 1.0)
    assert [t.user_attrs[PROPOSED_BY] for t in study.trials] == ["seed baseline", "random sampler"]
