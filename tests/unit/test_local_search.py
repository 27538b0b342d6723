"""The local phase of the default search (sweeper/search/local.py): single-lever moves from the
incumbent, never a rule-excluded or already-measured config, and a crash region is left."""

import sys
import warnings
from pathlib import Path

import optuna

from sweeper.search.configs import config_key, suggest_config
from sweeper.search.local import PROPOSED_BY, LocalSearchSampler, single_lever
from sweeper.spec.rules import excluded_by_rule, violated_constraints
from sweeper.spec.space import load_space

ROOT = Path(__file__).resolve().parents[2]
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
    # Once on the island, moves leave the crash region behind: few crashes late in the search.
    first_feasible = trace.crashed.index(False)
    late = trace.crashed[first_feasible + 20:]
    assert sum(late) <= len(late) // 2, trace.crashed


def test_every_sampler_labels_its_trials():
    from sweeper.search.local import ensure_proposed_by
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    study.enqueue_trial(SPACE.seeds[0].params, user_attrs={"seed": "baseline"})
    for _ in range(2):
        trial = study.ask()
        ensure_proposed_by(trial, "random")
        study.tell(trial, 1.0)
    assert [t.user_attrs[PROPOSED_BY] for t in study.trials] == ["seed baseline", "random sampler"]


def test_nothing_feasible_spreads_over_lever_values():
    # Every config crashes: proposals are space-filling (each lever's values used about equally),
    # never a repeat, never a rule-excluded config.
    sampler = LocalSearchSampler(SPACE, optuna.samplers.TPESampler(seed=0), seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    launched = _run(study, lambda c: None, 18)
    labels = [t.user_attrs[PROPOSED_BY] for t in study.trials]
    assert all(label.startswith("space-filling") for label in labels), labels
    keys = [config_key(c) for _, c in launched]
    assert len(keys) == len(set(keys)) == len(launched)
    for name in ("tp_size", "moe_runner_backend", "nccl_proto"):  # three values each: six of each
        counts = {}
        for _, config in launched:
            counts[config[name]] = counts.get(config[name], 0) + 1
        assert max(counts.values()) - min(counts.values()) <= 3, (name, counts)


def test_the_pooled_model_moves_the_lever_that_pays_first():
    # tp_size pays 2x per step under 3% noise, nothing else matters: over random configs (hardly
    # any two one lever apart) the model pooled over all trials ranks tp_size=8 first from tp 4.
    import random
    from sweeper.search.local import additive_gains, is_feasible, lever_values
    rng = random.Random(0)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    _run(study, lambda c: 10.0 * 2 ** [2, 4, 8].index(c["tp_size"]) * (1 + rng.gauss(0, 0.03)), 30)
    incumbent = max((t for t in study.trials if t.params["tp_size"] == 4 and is_feasible(t)),
                    key=lambda t: t.values[0])
    gain = additive_gains(study.trials, incumbent.params, 0.02)
    others = [(n, v) for n, param in SPACE.parameters.items() if n in incumbent.params and n != "tp_size"
              for v in lever_values(param) if v != incumbent.params[n]]
    assert gain(("tp_size", 8)) > max(gain(m) for m in others) > gain(("tp_size", 2))


def test_show_names_who_proposed_recent_and_running_trials():
    from sweeper.results.show import build_show_record
    study = optuna.create_study(direction="maximize", sampler=_local())
    study.enqueue_trial(SPACE.seeds[0].params, user_attrs={"seed": "baseline"})
    _run(study, lambda c: 10.0, 3)
    running = study.ask()
    record = build_show_record(study)
    assert [r["proposed_by"] for r in record["recent"]][0] == "seed baseline"
    assert all(r["proposed_by"] for r in record["recent"])
    assert record["running"][0]["trial"] == running.number
    assert record["running"][0]["proposed_by"] == study.trials[running.number].user_attrs[PROPOSED_BY]
