"""The campaign's adaptive validation rule (pure): when the winner separates, when another round
runs and of which finalists, when a sweep candidate joins, and when the top is declared a tie."""

from __future__ import annotations

from sweeper.workflows.ablation import Measured
from sweeper.search.configs import config_problem
from sweeper.workflows.validation import plan_validation
from sweeper.study.warm import parse_warm_source
from sweeper.spec.space_file import parse_space
from tests.support.spaces import TINY_SPACE

CANDIDATES = [("trial 1", 20.0), ("trial 2", 19.0), ("trial 3", 10.0)]


def runs(**values: list) -> list[Measured]:
    rows = [(label.replace("_", " "), v) for label, vs in values.items() for v in vs]
    return [Measured(label, v) for label, v in rows]


def test_a_clear_winner_separates_from_the_runner_up():
    plan = plan_validation(runs(trial_1=[20.0, 20.2, 19.9], trial_2=[15.0, 15.1, 14.9]), CANDIDATES, True, 6, 100, None)
    assert plan.runs == []
    assert plan.verdict["winner"] == "trial 1" and plan.verdict["runner_up"] == "trial 2"
    assert plan.verdict["separated"] and not plan.verdict["tie"] and plan.verdict["p"] < 0.05


def test_an_unresolved_top_gets_another_round_of_the_contenders_only():
    measured = runs(trial_1=[20.0, 19.0], trial_2=[19.5, 20.5])
    plan = plan_validation(measured, CANDIDATES[:2], True, 6, 100, None)
    assert sorted(plan.runs) == ["trial 1", "trial 2"]


def test_a_candidate_inside_the_winners_interval_joins():
    measured = runs(trial_1=[20.0, 19.0], trial_2=[12.0, 12.1])
    plan = plan_validation(measured, [*CANDIDATES[:2], ("trial 4", 19.8)], True, 6, 100, None)
    assert plan.runs == ["trial 1", "trial 4"]  # trial 2 is beaten; trial 4 could be the winner


def test_the_top_is_a_tie_when_repeats_or_budgets_run_out():
    measured = runs(trial_1=[20.0, 19.0, 20.5], trial_2=[19.5, 20.5, 19.0])
    for max_repeats, launches, seconds, why in ((3, 100, None, "--max-repeats"), (6, 1, None, "launch budget"),
                                                (6, 100, 0.0, "time budget")):
        plan = plan_validation(measured, CANDIDATES[:2], True, max_repeats, launches, seconds)
        assert plan.runs == [] and plan.verdict["tie"] and plan.verdict["tied_with"] == ["trial 2"]
        assert why in plan.verdict["reason"]


def test_minimize_ranks_the_lowest_mean_first_and_failed_runs_do_not_count():
    measured = runs(trial_1=[5.0, 5.1, None], trial_2=[9.0, 9.1])
    plan = plan_validation(measured, [("trial 1", 5.0), ("trial 2", 9.0)], False, 6, 100, None)
    assert plan.verdict["winner"] == "trial 1" and plan.verdict["separated"]


def test_every_finalist_failing_has_no_winner():
    plan = plan_validation(runs(trial_1=[None, None]), CANDIDATES[:1], True, 6, 100, None)
    assert plan.verdict["winner"] is None


def test_config_problem_names_what_the_new_space_rejects():
    space = parse_space(TINY_SPACE, "tiny.yaml")
    ok = {"tp_size": 8, "ep_size": 1, "moe_runner_backend": "marlin", "moe_a2a_backend": "none", "nccl_proto": "LL"}
    assert config_problem(space, ok) is None
    assert "not one of its values" in config_problem(space, {**ok, "tp_size": 2})
    assert "breaks constraint ep_size <= tp_size" in config_problem(space, {**ok, "tp_size": 4, "ep_size": 8})
    assert "no value for nccl_proto" in config_problem(space, {k: v for k, v in ok.items() if k != "nccl_proto"})
    assert "not parameters" in config_problem(space, {**ok, "attention_backend": "triton"})


def test_warm_start_sources_are_names_or_urls_with_the_name_after_a_hash():
    assert parse_warm_source("old") == ("old", None)
    assert parse_warm_source("sqlite:///r/old/study.db#old") == ("old", "sqlite:///r/old/study.db")
    assert parse_warm_source("postgresql+psycopg://u:p@h/db#x") == ("x", "postgresql+psycopg://u:p@h/db")


def test_a_round_planned_then_half_queued_is_completed_once_in_the_planned_order():
    import optuna

    from sweeper.study.runs import enqueue_runs
    from sweeper.workflows.validation import enqueue_planned, is_half_made, plan_runs

    study = optuna.create_study()
    assert is_half_made(study)  # no source recorded, nothing queued
    params = {"trial 1": {"x": 1}, "trial 2": {"x": 2}}
    assert enqueue_planned(study, params) == []  # nothing planned (or a study from before plans)
    plan_runs(study, ["trial 1", "trial 2", "trial 1"])
    enqueue_runs(study, [("trial 1", params["trial 1"])])  # a kill after the first of the round
    assert enqueue_planned(study, params) == ["trial 2", "trial 1"]
    assert enqueue_planned(study, params) == []  # a second resume queues nothing more
    trials = study.get_trials(deepcopy=False)
    assert [t.user_attrs["label"] for t in trials] == ["trial 1", "trial 2", "trial 1"]
    assert [t.system_attrs["fixed_params"] for t in trials] == [{"x": 1}, {"x": 2}, {"x": 1}]
    study.set_user_attr("validation_of", "s")
    assert not is_half_made(study)
