"""Which launches a study's trials intended on a host: the intent, or (older studies) the record."""

from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from sweeper.hosts.base import LaunchIntent
from sweeper.study.recovery import build_intent_attr, trial_launches
from sweeper.study.runs import queued_params


def trial(number, **attrs):
    t = create_trial(state=TrialState.FAIL, user_attrs=attrs)
    t.number = number
    return t


def test_intent_without_a_record_and_a_record_without_an_intent_are_both_found():
    intent = LaunchIntent("box", "tok-a", "/w/st/0")
    old_record = {"host": "box", "pid": 5, "pgid": 5, "start_ticks": 9, "token": "tok-b", "log_path": "/w/st/1/server.log"}
    trials = [trial(0, launch_intent=build_intent_attr(intent, 0)),
              trial(1, process=old_record),
              trial(2, launch_intent=build_intent_attr(LaunchIntent("other", "tok-c", "/x"), 2)),
              trial(3)]
    found = trial_launches(trials, "box")
    assert set(found) == {"tok-a", "tok-b"}
    assert (found["tok-a"].trial, found["tok-a"].intent, found["tok-a"].recorded) == (0, intent, False)
    assert found["tok-b"].intent == LaunchIntent("box", "tok-b", "/w/st/1") and found["tok-b"].recorded


def test_a_trial_killed_before_it_suggested_keeps_its_queued_config():
    queued = create_trial(state=TrialState.FAIL, system_attrs={"fixed_params": {"tp_size": 8}})
    assert queued_params(queued) == {"tp_size": 8}
    suggested = create_trial(state=TrialState.FAIL, params={"tp_size": 4},
                             distributions={"tp_size": CategoricalDistribution([4, 8])})
    assert queued_params(suggested) == {"tp_size": 4}
