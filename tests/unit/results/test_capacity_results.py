"""A capacity study's results (objective max_load_within_slo), from storage alone: the search picks
the loads (doubling, then bisection), so the leaderboard, the export, the report's tables and the
serving trade-off show every load the trials measured, not only workload.concurrency, and each
trial's found capacity."""

from __future__ import annotations

import math

import optuna
import pytest

from sweeper.loadgen.capacity import CapacitySlo, capacity_record, find_capacity
from sweeper.results.export import build_export_frame
from sweeper.results.leaderboard import leaderboard_frame, study_levels
from sweeper.results.report import build_report
from sweeper.results.report_data import build_report_data
from sweeper.results.table import format_leaderboard_table
from sweeper.study.record import constraint_values, objective_value, outcome_attrs
from sweeper.spec.space_file import parse_space
from sweeper.trial.load_ladder import per_gpu_fields
from sweeper.trial.context import TrialOutcome

SPACE_TEXT = """\
name: cap
engine: sim
model: m
parameters:
  tp: {type: categorical, choices: [1, 2, 4], flag: --tp-size}
workload: {concurrency: [1, 4], capacity_max_concurrency: 16}
objective: {metric: max_load_within_slo}
slo: {p99_ttft_ms: 100}
"""
SPACE = parse_space(SPACE_TEXT, "inline")
SLO = CapacitySlo(p99_ttft_ms=100)


def searched(batch: int, gpus: int) -> TrialOutcome:
    """A trial's outcome as the sweep records it: the real search over a server of `batch` slots
    (TTFT grows by a 175 ms service time per full batch ahead), each level with per-GPU metrics."""
    levels = {}

    def measure(load: int) -> dict:
        metrics = {"valid": True, "failed": 0, "p99_ttft_ms": 20 + (math.ceil(load / batch) - 1) * 175.0,
                   "output_throughput": 10.0 * min(load, batch), "output_throughput_per_user": 10.0}
        levels[load] = metrics = {**metrics, **per_gpu_fields(metrics, gpus)}
        return metrics

    found = find_capacity(measure, SLO, ceiling=SPACE.workload.capacity_max_concurrency)
    return TrialOutcome({"tp": gpus}, levels=levels, capacity=capacity_record(found, "concurrency", SLO, dict),
                        output_text="Paris", launched=True)


@pytest.fixture
def study() -> optuna.Study:
    study = optuna.create_study(direction="maximize", study_name="cap")
    study.set_user_attr("space", SPACE.model_dump(mode="json"))
    study.set_user_attr("space_text", SPACE_TEXT)
    for batch, gpus in ((5, 1), (12, 2), (64, 4)):  # capacity 5 (1, 2, 4, 8, 6, 5), 12, 16 (capped)
        outcome = searched(batch, gpus)
        study.enqueue_trial({"tp": gpus})  # the params its config_key names, not the sampler's draw
        trial = study.ask({"tp": optuna.distributions.CategoricalDistribution([1, 2, 4])})
        for key, value in {**outcome_attrs(outcome), "config_key": f'{{"tp": {gpus}}}'}.items():
            trial.set_user_attr(key, value)
        for key, value in constraint_values(outcome, SPACE).items():
            trial.set_constraint(key, value)
        study.tell(trial, objective_value(SPACE, outcome))
    study.set_user_attr("reference_text", "Paris")
    return study


def test_the_levels_shown_are_every_load_the_searches_measured(study):
    assert study_levels(study) == [1, 2, 4, 5, 6, 8, 12, 13, 14, 16]  # workload.concurrency is [1, 4]
    frame = leaderboard_frame(study).set_index("trial")
    assert frame.loc[1, "c12_output_tok_s"] == 120.0 and frame.loc[1, "c13_ttft_p99_ms"] == 195.0
    assert frame.loc[0, "c6_output_tok_s_per_gpu"] == 50.0 and math.isnan(frame.loc[0, "c12_output_tok_s"])


def test_each_trial_shows_the_capacity_its_search_found(study):
    frame = build_export_frame(study)
    assert list(frame["trial"]) == [2, 1, 0] and list(frame["rank_value"]) == [16.0, 12.0, 5.0]
    assert list(frame["capacity"]) == [16.0, 12.0, 5.0] and list(frame["capacity_capped"]) == [True, False, False]
    assert list(frame["capacity_first_failing"].fillna(-1)) == [-1, 13.0, 6.0]
    table = format_leaderboard_table(study, top=3)
    cells = list(table.columns[3].cells)
    assert cells == ["16 (held at the ceiling)", "12 (SLO broke at 13)", "5 (SLO broke at 6)"]
    assert "C=13\ntok/s" in [c.header for c in table.columns]


def test_the_report_and_the_serving_trade_off_read_the_searched_levels(study):
    data = build_report_data(study)
    assert data.levels == study_levels(study)
    assert data.top[1].trial == 1 and data.top[1].levels == (1, 2, 4, 8, 12, 13, 14, 16)
    assert (1, 12, 10.0, 60.0) in data.serving_points and (0, 5, 10.0, 50.0) in data.serving_points
    assert len(data.serving_points) == 6 + 8 + 5
    html = build_report(study).html
    assert "12 (SLO broke at 13)" in html and "C=14 tok/s" in html and "19 levels of 3 feasible configs" in html
