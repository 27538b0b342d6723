"""Open-loop rate levels (workload.request_rates): the space's validation, the one place that
names levels (sweeper/levels.py), and the plan's seeded, time-scaled arrivals."""

from __future__ import annotations

import pytest

from sweeper.errors import ConfigError
from sweeper.levels import (Rate, as_level_of, goal_name, level_key, level_label, metric_column, parse_level_key,
                            stored_workload_levels)
from sweeper.loadgen.client import StreamOptions
from sweeper.loadgen.ladder import LoadPlan
from sweeper.spec.space import space_fingerprint
from sweeper.spec.space_file import parse_space

HEAD = """\
name: r
engine: sim
model: m
parameters:
  tp: {type: categorical, choices: [1, 2], flag: --tp}
"""


def space_with(body: str):
    return parse_space(HEAD + body, "space.yaml")


def refusal(body: str) -> str:
    with pytest.raises(ConfigError) as caught:
        space_with(body)
    return str(caught.value)


def test_rates_make_the_ladder_and_the_objective_reads_a_rate():
    space = space_with("workload: {request_rates: [0.5, 2, 8], arrival: fixed, max_concurrency: 32}\n"
                       "objective: {level: 2}\n")
    assert space.workload.levels == [Rate(0.5), Rate(2), Rate(8)]
    assert all(isinstance(level, Rate) for level in space.workload.levels)
    goal = space.goals[0]
    assert isinstance(goal.level, Rate) and goal.level == 2 and goal.name == "output_throughput@r2"
    default = space_with("workload: {request_rates: [0.5, 2.5]}\n").goals[0]
    assert default.level == 2.5 and default.name == "output_throughput@r2.5"  # default: the highest rate
    pareto = space_with("workload: {request_rates: [1, 4]}\n"
                        "objectives: [{metric: output_throughput}, {metric: p99_ttft_ms}]\n").goals
    assert [g.name for g in pareto] == ["output_throughput@r4", "p99_ttft_ms@r1"]


def test_a_closed_loop_space_is_as_before():
    space = space_with("workload: {concurrency: [1, 4]}\nobjective: {level: 4}\n")
    assert space.workload.levels == [1, 4] and not space.workload.open_loop
    assert space.goals[0].name == "output_throughput@c4" and type(space.goals[0].level) is int
    # the open-loop keys leave the fingerprints of older studies as they were (resume compares
    # them): this hash is what sweeper computed for this space before the keys existed
    assert space_fingerprint(space) == "535af62cada687da"
    explicit = space_with("workload: {concurrency: [1, 4], request_rates: null, max_concurrency: null}\n"
                          "objective: {level: 4}\n")
    assert space_fingerprint(explicit) == space_fingerprint(space)


@pytest.mark.parametrize("rates", ["[2, 1]", "[1, 1]", "[0, 2]", "[-1]", "[.inf]", "[]"])
def test_bad_rates_are_refused_with_their_line(rates):
    message = refusal(f"workload:\n  input_len: 64\n  request_rates: {rates}\n")
    assert message.startswith("space.yaml:8: workload.request_rates:"), message


def test_an_objective_level_must_be_one_of_the_rates():
    message = refusal("workload: {request_rates: [1, 2]}\nobjective: {level: 4}\n")
    assert "space.yaml:7: objective.level: 4 is not one of workload.request_rates" in message
    closed = refusal("workload: {concurrency: [1, 4]}\nobjective: {level: 2.5}\n")
    assert "objective.level: 2.5 is not one of workload.concurrency" in closed
    target = refusal("workload: {request_rates: [1, 2]}\ntarget: {value: 100, level: 3}\n")
    assert "target.level: 3 is not one of workload.request_rates" in target


@pytest.mark.parametrize("body, where, expected", [
    ("workload: {max_concurrency: 8}\n", "workload.max_concurrency", "set workload.request_rates too"),
    ("workload: {arrival: fixed}\n", "workload.arrival", "set workload.request_rates too"),
    ("workload: {request_rates: [1], precision: 0.02}\n", "workload.precision", "drives closed-loop levels"),
    ("workload: {request_rates: [1], load: native}\n", "workload.request_rates", "load: sweeper"),
    ("workload: {request_rates: [1, 2]}\nobjective: {metric: max_load_within_slo}\nslo: {p99_ttft_ms: 100}\n",
     "workload.request_rates", "give request_rates: [START] (got 2 rates)"),
    ("workload: {request_rates: [8], capacity_max_rate: 4}\nobjective: {metric: max_load_within_slo}\n"
     "slo: {p99_ttft_ms: 100}\n", "workload.capacity_max_rate", "below the start rate 8"),
    ("workload: {request_rates: [1], arrival: bursty}\n", "workload.arrival", "poisson"),
])
def test_open_loop_keys_that_do_not_go_together(body, where, expected):
    message = refusal(body)
    assert f": {where}:" in message and expected in message, message


def test_one_function_names_each_level():
    assert [level_label(level) for level in (4, Rate(2.5), Rate(8), Rate(0.25))] == ["c4", "r2.5", "r8", "r0.25"]
    assert level_key(4) == "4" and level_key(Rate(2.5)) == "r2.5"  # closed-loop keys as stored before
    for level in (4, Rate(2.5), Rate(0.1), Rate(1e-3)):
        assert parse_level_key(level_key(level)) == level
        assert type(parse_level_key(level_key(level))) is type(level)
    assert metric_column(16, "output_tok_s") == "c16_output_tok_s"
    assert metric_column(Rate(2.5), "output_tok_s") == "r2.5_output_tok_s"
    assert goal_name("p99_ttft_ms", Rate(8)) == "p99_ttft_ms@r8"
    assert stored_workload_levels({"concurrency": [1, 4], "request_rates": None}) == [1, 4]
    assert stored_workload_levels({"concurrency": [1, 4], "request_rates": [2.5]}) == [Rate(2.5)]
    rates = [Rate(2), Rate(8)]
    assert as_level_of(rates, "r8") == 8 and as_level_of(rates, "2") == 2 and as_level_of(rates, 8.0) == 8
    assert as_level_of(rates, "c8") is None and as_level_of(rates, "3") is None and as_level_of([1, 4], "r4") is None


def test_arrivals_are_seeded_by_the_workload_and_scaled_to_wall_time():
    plan = LoadPlan(rates=(2.0, 8.0), seed=7, time_scale=0.1, options=StreamOptions())
    at8, cap = plan.at_level(Rate(8))
    assert at8.request_rate == 8 and cap == 0 and at8.requests_at(cap) == 40  # 5 modelled s of arrivals
    offsets = at8.arrival_offsets(40)
    assert offsets == LoadPlan(rates=(8.0,), seed=7, time_scale=0.1).at_level(Rate(8))[0].arrival_offsets(40)
    assert offsets != replace_seed(plan, 8).at_level(Rate(8))[0].arrival_offsets(40)
    unscaled = replace_scale(plan).at_level(Rate(8))[0].arrival_offsets(40)
    assert offsets == pytest.approx([0.1 * t for t in unscaled])  # a modelled second is 0.1 s of wall time
    assert plan.at_level(4) == (plan, 4) and plan.arrival_offsets(4) is None  # a closed level: no arrivals
    fixed = LoadPlan(rates=(4.0,), poisson=False).at_level(Rate(4))[0].arrival_offsets(5)
    assert fixed == pytest.approx([0, 0.25, 0.5, 0.75, 1.0])


def replace_seed(plan: LoadPlan, seed: int) -> LoadPlan:
    from dataclasses import replace
    return replace(plan, seed=seed)


def replace_scale(plan: LoadPlan) -> LoadPlan:
    from dataclasses import replace
    return replace(plan, time_scale=1.0)
