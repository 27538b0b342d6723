"""In-memory Optuna studies of recorded outcomes, for the tests of ranking and the surfaces that read
it (leaderboard, answer, confidence): one space with one lever, level metrics, a trial recorded as
the pipeline records it."""

from __future__ import annotations

import optuna

from sweeper.study.record import constraint_values, objective_value, outcome_attrs
from sweeper.spec.space_file import parse_space

TP_SPACE = parse_space("""\
name: t
engine: sim
model: m
parameters:
  tp: {type: categorical, choices: [4, 8], flag: --tp-size}
workload: {concurrency: [1, 16]}
""", "inline")


def level(tok_s: float, valid: bool = True) -> dict:
    """One measured level's metrics: tok_s and fixed latencies."""
    return {"output_throughput": tok_s, "median_ttft_ms": 100.0, "p99_ttft_ms": 200.0,
            "median_itl_ms": 50.0, "p99_itl_ms": 70.0, "valid": valid}


def record(study, params, outcome, **attrs):
    """Record `outcome` as a finished trial of `study` (its attrs, constraints, objective); its number."""
    if params:  # else the sampler's draw
        study.enqueue_trial(params)
    trial = study.ask({"tp": optuna.distributions.CategoricalDistribution([4, 8])})
    for key, value in {**outcome_attrs(outcome), **attrs}.items():
        trial.set_user_attr(key, value)
    for key, value in constraint_values(outcome, TP_SPACE).items():
        trial.set_constraint(key, value)
    study.tell(trial, objective_value(TP_SPACE, outcome))
    return trial.number


def make_study():
    """An empty in-memory study of TP_SPACE, maximising."""
    study = optuna.create_study(direction="maximize")
    study.set_user_attr("space", TP_SPACE.model_dump(mode="json"))
    return study
