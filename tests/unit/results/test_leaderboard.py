"""Outcomes become Optuna data; the leaderboard derives feasibility from storage alone."""

import math

import optuna
from optuna.trial import TrialState

from sweeper.study.record import constraint_values, objective_value
from sweeper.study.trials import best_trial
from sweeper.results.leaderboard import leaderboard_frame
from sweeper.trial.context import Failure, TrialOutcome
from tests.support.studies import TP_SPACE, level, make_study, record


def test_objective_is_the_level_metric_and_failures_never_score():
    ok = TrialOutcome(config={}, levels={1: level(10.0), 16: level(25.0)}, launched=True)
    assert objective_value(TP_SPACE, ok) == 25.0 and constraint_values(ok, TP_SPACE) == {"config_fault": 0.0, "slo": 0.0}
    crashed = TrialOutcome(config={}, failure=Failure("wait_ready", "oom", "x"), launched=True)
    assert objective_value(TP_SPACE, crashed) == 0.0 and constraint_values(crashed, TP_SPACE) == {"config_fault": 1.0, "slo": 0.0}
    invalid = TrialOutcome(config={}, levels={16: level(99.0, valid=False)}, launched=True)
    assert objective_value(TP_SPACE, invalid) == 0.0


def test_ranking_excludes_failures_duplicates_and_late_garbage():
    study = make_study()
    good = record(study, {}, TrialOutcome({}, levels={1: level(9.0), 16: level(24.0)}, output_text="Paris", launched=True))
    garbage = record(study, {}, TrialOutcome({}, levels={1: level(12.0), 16: level(30.0)}, output_text="zq!!", launched=True))
    crash = record(study, {}, TrialOutcome({}, failure=Failure("wait_ready", "hang", "stalled"), launched=True))
    dup = record(study, {}, TrialOutcome({}, levels={16: level(24.0)}, output_text="Paris"), duplicate_of=good)
    study.set_user_attr("reference_text", "Paris")

    assert best_trial(study).number == good
    frame = leaderboard_frame(study).set_index("trial")
    assert bool(frame.loc[good, "feasible"]) and frame.loc[good, "objective"] == 24.0
    assert frame.loc[garbage, "failure_kind"] == "bad_output" and math.isnan(frame.loc[garbage, "objective"])
    assert frame.loc[crash, "failure_stage"] == "wait_ready" and frame.loc[crash, "failure_kind"] == "hang"
    assert frame.loc[dup, "duplicate_of"] == good and not frame.loc[dup, "feasible"]
    assert frame.loc[good, "c16_output_tok_s"] == 24.0 and frame.loc[good, "c1_ttft_p99_ms"] == 200.0
    assert list(leaderboard_frame(study)["trial"])[0] == good  # best feasible first


def test_no_reference_yet_means_unverified_outputs_still_rank():
    study = make_study()
    only = record(study, {}, TrialOutcome({}, levels={16: level(20.0)}, output_text="x", launched=True))
    assert best_trial(study).number == only


def test_failed_and_running_trials_are_rows_but_never_rank():
    study = make_study()
    running = study.ask({"tp": optuna.distributions.CategoricalDistribution([4, 8])})
    failed = study.ask({"tp": optuna.distributions.CategoricalDistribution([4, 8])})
    study.tell(failed, state=TrialState.FAIL)
    frame = leaderboard_frame(study).set_index("trial")
    assert frame.loc[running.number, "state"] == "RUNNING" and not frame.loc[running.number, "feasible"]
    assert frame.loc[failed.number, "state"] == "FAIL"
    assert best_trial(study) is None
