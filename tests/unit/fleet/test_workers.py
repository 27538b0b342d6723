"""The pure decisions of a shared study: claims, budget, GPU-set slots."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState, create_trial
from optuna.distributions import CategoricalDistribution

from sweeper.spec.hosts import HostSpec
from sweeper.spec.space_file import parse_space
from sweeper.errors import ConfigError
from sweeper.fleet.workers import budget_state, decide_claim, gpu_count_of, slot_host_spec, slot_plan

DIST = {"x": CategoricalDistribution([1, 2, 3])}


def trial(number: int, state: TrialState, key: str, **attrs) -> optuna.trial.FrozenTrial:
    t = create_trial(state=state, params={"x": 1}, distributions=DIST,
                     value=1.0 if state == TrialState.COMPLETE else None,
                     user_attrs={"config_key": key, **attrs})
    t.number = number
    return t


def test_a_measured_config_is_a_duplicate_and_one_being_measured_is_waited_for():
    done = trial(0, TrialState.COMPLETE, "k1", launched=True)
    running = trial(1, TrialState.RUNNING, "k2", claimed=True)
    assert decide_claim([done, running], 5, "k1", budget=10) == ("duplicate", done)
    assert decide_claim([done, running], 5, "k2", budget=10) == ("wait", running)
    assert decide_claim([done, running], 5, "k3", budget=10) == ("run", None)


def test_an_unclaimed_or_failed_trial_of_the_same_config_does_not_block():
    failed = trial(0, TrialState.FAIL, "k1", launched=True)
    unclaimed = trial(1, TrialState.RUNNING, "k1")  # not past its claim: it may be a duplicate itself
    assert decide_claim([failed, unclaimed], 5, "k1", budget=10) == ("run", None)


def test_the_budget_counts_finished_evaluations_and_claimed_running_trials():
    trials = [trial(0, TrialState.COMPLETE, "a", launched=True),
              trial(1, TrialState.COMPLETE, "b", launched=True, duplicate_of=0),  # free
              trial(2, TrialState.COMPLETE, "c"),  # excluded by a rule: never launched, free
              trial(3, TrialState.RUNNING, "d", claimed=True)]
    assert budget_state(trials, budget=3) == "open"
    assert budget_state(trials, budget=2) == "wait"  # trial 3 may still fail and give its slot back
    assert budget_state(trials, budget=1) == "spent"
    assert decide_claim(trials, 9, "e", budget=2) == ("wait", None)
    assert budget_state(trials, budget=2, me=3) == "open"  # a trial does not wait for itself


SPACE = """
name: s
engine: sim
model: m
gpus: tp_size
parameters:
  tp_size: {type: categorical, choices: [2, 4, 8], flag: --tp-size}
"""


def test_a_config_that_fits_a_gpu_set_runs_there_and_a_bigger_one_takes_the_host():
    space = parse_space(SPACE, "s.yaml")
    spec = HostSpec(transport="local", gpu_sets=["0,1,2,3", "4,5,6,7"], base_port=31000)
    assert gpu_count_of(space, {"tp_size": 4}) == 4
    assert slot_plan("box", spec, "4,5,6,7", 4) == (["box[4,5,6,7]"], "4,5,6,7")
    assert slot_plan("box", spec, "4,5,6,7", 8) == (["box[0,1,2,3]", "box[4,5,6,7]"], "0,1,2,3,4,5,6,7")
    assert slot_plan("box", HostSpec(transport="local"), None, 8) == (["box"], None)
    second = slot_host_spec(spec, "4,5,6,7", "4,5,6,7")
    assert second.env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7" and second.base_port == 31500
    assert slot_host_spec(spec, "0,1,2,3", None) is spec


def test_bad_gpu_sets_and_gpus_expressions_are_named():
    with pytest.raises(ValueError, match="overlap"):
        HostSpec(transport="local", gpu_sets=["0,1", "1,2"])
    with pytest.raises(ValueError, match="GPU indices"):
        HostSpec(transport="local", gpu_sets=["0-3"])
    with pytest.raises(ConfigError, match="gpus"):
        parse_space(SPACE.replace("gpus: tp_size", "gpus: tp_sise"), "s.yaml")
