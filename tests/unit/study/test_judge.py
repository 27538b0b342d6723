"""Early abandon and SLOs: pure judgements on a measured level."""

from sweeper.spec.space_file import parse_space
from sweeper.study.record import constraint_values, judge_level, slo_excess
from sweeper.trial.context import Failure, TrialOutcome

SPACE = parse_space("""\
name: t
engine: sim
model: m
parameters:
  tp: {type: categorical, choices: [4, 8], flag: --tp-size}
workload: {concurrency: [1, 4, 16]}
slo: {p99_ttft_ms: 1000}
search: {abandon_below: 0.8}
""", "inline")


def metrics(tok_s, ttft_p99=500.0, valid=True):
    return {"output_throughput": tok_s, "p99_ttft_ms": ttft_p99, "valid": valid}


def test_an_slo_broken_below_the_objective_level_stops_the_ladder():
    verdict = judge_level(SPACE, 4, metrics(20.0, ttft_p99=1500.0), incumbent=None)
    assert verdict == Failure("load", "slo", "SLO broken at concurrency 4")
    assert slo_excess(SPACE, {4: metrics(20.0, ttft_p99=1500.0)}) == 0.5
    outcome = TrialOutcome({}, failure=verdict, levels={4: metrics(20.0, ttft_p99=1500.0)})
    assert constraint_values(outcome, SPACE) == {"config_fault": 0.0, "slo": 0.5}


def test_abandon_only_when_even_linear_scaling_cannot_catch_the_incumbent():
    # at C=4, 5 tok/s scales at most to 20 at C=16: below 80% of 30
    verdict = judge_level(SPACE, 4, metrics(5.0), incumbent=30.0)
    assert verdict.kind == "abandoned" and "at most 20.00" in verdict.message
    assert judge_level(SPACE, 4, metrics(7.0), incumbent=30.0) is None  # 28 >= 24: keep going
    assert judge_level(SPACE, 4, metrics(5.0), incumbent=None) is None  # nothing to compare with
    assert judge_level(SPACE, 16, metrics(5.0), incumbent=30.0) is None  # the objective level itself
    assert judge_level(SPACE, 4, metrics(5.0, valid=False), incumbent=30.0) is None


def test_abandoned_is_not_a_config_fault():
    outcome = TrialOutcome({}, failure=Failure("load", "abandoned", "x"), levels={4: metrics(5.0)})
    assert constraint_values(outcome, SPACE)["config_fault"] == 0.0
