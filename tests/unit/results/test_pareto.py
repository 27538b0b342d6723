"""The two-objective (Pareto) mode's pure parts and its results, on real in-memory Optuna studies:
the `objectives:` key, dominance, abandon by dominance, the front on the leaderboard and in
exports and the report."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pandas as pd
import pytest

from sweeper.workflows.ablation import summarize_pareto_finalists
from sweeper.spec.space import space_fingerprint
from sweeper.spec.space_file import load_space, parse_space
from sweeper.errors import ConfigError, UserError
from sweeper.search.pareto import dominated_verdict, dominates, front_keys
from sweeper.study.record import constraint_values, judge_level, objective_values, outcome_attrs
from sweeper.results.export import build_export_frame, export_dtypes, write_export
from sweeper.results.importance import build_param_importances
from sweeper.study.trials import best_trial
from sweeper.study.trials import pareto_trials
from sweeper.results.ranking import ranked_frame
from sweeper.results.report import build_report
from sweeper.results.report_data import build_report_data
from sweeper.study.objective import _copy_duplicate, _front_points
from sweeper.trial.context import Failure, TrialOutcome

BASE = """\
name: p
engine: sim
model: m
parameters:
  tp: {type: categorical, choices: [1, 2, 4, 8], flag: --tp-size}
workload: {concurrency: [1, 4, 16]}
"""
PARETO = BASE + """\
objectives:
  - {metric: output_throughput}
  - {metric: p99_ttft_ms}
"""
SPACE = parse_space(PARETO + "search: {abandon_below: 1.0}\n", "inline")


def config_error(text: str, tmp_path: Path) -> ConfigError:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_space(path)
    return info.value


# ---------------------------------------------------------------- the objectives key

def test_objectives_default_to_throughput_at_the_top_level_and_latency_at_the_bottom():
    space = parse_space(PARETO, "inline")
    assert space.is_pareto and [(g.metric, g.level, g.direction) for g in space.goals] == [
        ("output_throughput", 16, "maximize"), ("p99_ttft_ms", 1, "minimize")]
    assert space.objective_level == 16  # SLOs count up to the highest level an objective reads
    levels = parse_space(PARETO.replace("{metric: p99_ttft_ms}", "{metric: median_itl_ms, level: 4}")
                         .replace("{metric: output_throughput}", "{metric: total_throughput, level: 4}"), "x")
    assert [g.name for g in levels.goals] == ["total_throughput@c4", "median_itl_ms@c4"]
    one = parse_space(BASE, "inline")
    assert not one.is_pareto and [g.name for g in one.goals] == ["output_throughput@c16"]


@pytest.mark.parametrize("objectives, path, expected", [
    ("  - {metric: p99_ttft_ms}\n  - {metric: output_throughput}\n", "objectives[0].metric",
     "objective 1 must be a throughput to maximise: one of output_throughput"),
    ("  - {metric: output_throughput}\n  - {metric: request_throughput}\n", "objectives[1].metric",
     "objective 2 must be a latency to minimise: one of median_ttft_ms, p99_ttft_ms"),
    ("  - {metric: output_throughput}\n", "objectives", "at least 2 items"),
    ("  - {metric: output_throughput}\n  - {metric: p99_ttft_ms}\n  - {metric: p99_itl_ms}\n",
     "objectives", "at most 2 items"),
    ("  - {metric: output_throughput, level: 32}\n  - {metric: p99_ttft_ms}\n", "objectives[0].level",
     "32 is not one of workload.concurrency"),
    ("  - {metric: output_throughput}\n  - {metric: p99_ttft_ms, direction: maximize}\n",
     "objectives[1].direction", "unknown key"),
    ("  - {metric: tok_s}\n  - {metric: p99_ttft_ms}\n", "objectives[0].metric", "'tok_s'"),
])
def test_a_bad_objectives_block_names_file_line_key_and_what_was_expected(tmp_path, objectives, path, expected):
    error = config_error(BASE + "objectives:\n" + objectives, tmp_path)
    assert error.path == path and expected in error.detail, str(error)
    assert error.line is not None and str(error).startswith(f"{tmp_path / 'space.yaml'}:{error.line}: {path}: ")


def test_the_key_leaves_the_fingerprints_of_older_one_objective_studies_as_they_were():
    """A study stores its space's hash; resume refuses a space whose hash changed. Spaces without
    `objectives` hash as before the key existed (hash of the dump without it)."""
    import hashlib
    import json

    one = parse_space(BASE, "inline")
    before = {k: v for k, v in one.model_dump(mode="json").items() if k != "objectives"}
    for key in ("request_rates", "arrival", "max_concurrency", "capacity_max_rate", "capacity_rate_resolution",
                "measure", "ramp"):
        before["workload"].pop(key)  # the open-loop and steady-level keys, newer still, left out the same way
    assert space_fingerprint(one) == hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()[:16]
    assert space_fingerprint(parse_space(PARETO, "inline")) != space_fingerprint(one)


def test_objective_and_objectives_together_are_refused(tmp_path):
    error = config_error(PARETO + "objective: {metric: output_throughput}\n", tmp_path)
    assert error.path == "objectives" and "not both" in error.detail and error.line == 7


# ---------------------------------------------------------------- dominance and the front

def test_dominance_and_the_front():
    up_down = (True, False)
    assert dominates((20, 100), (10, 200), up_down) and dominates((20, 100), (20, 200), up_down)
    assert not dominates((20, 100), (20, 100), up_down)  # equal: neither dominates
    assert not dominates((20, 300), (10, 200), up_down)  # a trade-off
    points = {"fast": (30.0, 400.0), "snappy": (12.0, 90.0), "middle": (20.0, 200.0),
              "worse": (19.0, 210.0), "twin": (20.0, 200.0)}
    assert front_keys(points, up_down) == ["fast", "snappy", "middle", "twin"]


def metrics(tok_s: float, ttft: float = 100.0, valid: bool = True) -> dict:
    return {"output_throughput": tok_s, "p99_ttft_ms": ttft, "valid": valid}


def test_abandon_by_dominance_only_with_the_latency_measured_and_the_throughput_level_to_come():
    front = [(3, 40.0, 90.0), (5, 100.0, 300.0)]
    # C=1 measured: TTFT 150 and 2 tok/s -> at most 32 at C=16, below trial 3 (40, TTFT 90 <= 150)
    verdict = dominated_verdict(SPACE, {1: metrics(2.0, ttft=150.0)}, front)
    assert verdict.kind == "abandoned" and "trial 3" in verdict.message and "at most 32.00" in verdict.message
    # a TTFT nobody beats keeps it going, however slow: it may be on the front
    assert dominated_verdict(SPACE, {1: metrics(2.0, ttft=80.0)}, front) is None
    # C=4: the optimistic bound from 4 -> 16 (4x); 11 tok/s -> 44 > 40: not dominated by trial 3
    assert dominated_verdict(SPACE, {1: metrics(2.0, ttft=150.0), 4: metrics(11.0)}, front) is None
    assert dominated_verdict(SPACE, {1: metrics(2.0, ttft=150.0), 4: metrics(9.0)}, front).kind == "abandoned"
    # the throughput level measured: nothing left to save; no front yet; an invalid level
    done = {1: metrics(2.0, ttft=150.0), 4: metrics(9.0), 16: metrics(30.0)}
    assert dominated_verdict(SPACE, done, front) is None
    assert dominated_verdict(SPACE, {1: metrics(2.0, ttft=150.0)}, []) is None
    assert dominated_verdict(SPACE, {1: metrics(2.0, ttft=150.0, valid=False)}, front) is None
    off = parse_space(PARETO, "inline")  # abandon_below 0: never
    assert dominated_verdict(off, {1: metrics(2.0, ttft=150.0)}, front) is None


def test_in_the_pareto_mode_only_an_slo_stops_the_ladder_through_judge_level():
    slo = parse_space(PARETO + "search: {abandon_below: 1.0}\nslo: {p99_ttft_ms: 1000}\n", "inline")
    assert judge_level(slo, 1, metrics(0.1), incumbent=1e9) is None  # no single incumbent to compare with
    assert judge_level(slo, 4, metrics(0.1, ttft=2000.0), incumbent=None).kind == "slo"


def test_objective_values_are_both_goals_and_failures_get_the_worst_of_each():
    ok = TrialOutcome({}, levels={1: metrics(5.0, ttft=80.0), 16: metrics(30.0, ttft=900.0)}, launched=True)
    assert objective_values(SPACE, ok) == [30.0, 80.0]
    crashed = TrialOutcome({}, failure=Failure("wait_ready", "oom", "x"), launched=True)
    assert objective_values(SPACE, crashed) == [0.0, 1e12]


# ---------------------------------------------------------------- results of a Pareto study

def record(study, tp: int, levels: dict, output_text: str = "Paris", failure: Failure | None = None, **attrs) -> int:
    study.enqueue_trial({"tp": tp})  # else the sampler draws tp: all four feasible alike 1 time in 64 (CI, 2026-12-06)
    trial = study.ask({"tp": optuna.distributions.CategoricalDistribution([1, 2, 4, 8])})
    outcome = TrialOutcome({"tp": tp}, levels=levels, failure=failure, output_text=output_text, launched=True)
    for key, value in {**outcome_attrs(outcome), "config_key": f'{{"tp": {tp}}}', **attrs}.items():
        trial.set_user_attr(key, value)
    for key, value in constraint_values(outcome, SPACE).items():
        trial.set_constraint(key, value)
    study.tell(trial, objective_values(SPACE, outcome))
    return trial.number


@pytest.fixture
def study() -> optuna.Study:
    """Real Optuna storage (in memory), trials told as the sweep tells them."""
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.set_metric_names([g.name for g in SPACE.goals])
    study.set_user_attr("space", SPACE.model_dump(mode="json"))
    study.set_user_attr("space_text", PARETO + "search: {abandon_below: 1.0}\n")
    study.fast = record(study, 8, {1: metrics(9.0, ttft=300.0), 16: metrics(40.0)})
    study.snappy = record(study, 2, {1: metrics(11.0, ttft=90.0), 16: metrics(15.0)})
    study.middle = record(study, 4, {1: metrics(10.0, ttft=150.0), 16: metrics(30.0)})
    study.dominated = record(study, 1, {1: metrics(8.0, ttft=200.0), 16: metrics(25.0)})
    study.crashed = record(study, 1, {}, failure=Failure("wait_ready", "oom", "x"))
    study.dup = record(study, 8, {1: metrics(9.0, ttft=300.0), 16: metrics(40.0)}, duplicate_of=study.fast)
    # measured before the reference settled, then found to differ: infeasible however good it looks
    study.garbage = record(study, 2, {1: metrics(50.0, ttft=10.0), 16: metrics(99.0)}, output_text="zq!!")
    study.set_user_attr("reference_text", "Paris")
    return study


def test_the_front_holds_feasible_non_dominated_trials_by_throughput(study):
    front = [t.number for t in pareto_trials(study)]
    assert front == [study.fast, study.middle, study.snappy]
    assert best_trial(study).number == study.fast  # the front's best throughput


def test_abandon_compares_with_every_feasible_trial(study):
    assert sorted(_front_points(study)) == [(study.fast, 40.0, 300.0), (study.snappy, 15.0, 90.0),
                                            (study.middle, 30.0, 150.0), (study.dominated, 25.0, 200.0)]


def test_leaderboard_and_exports_keep_both_values_and_rank_only_the_front(study, tmp_path):
    frame = ranked_frame(study)
    assert list(frame["trial"][:4]) == [study.fast, study.middle, study.snappy, study.dominated]
    assert list(frame["rank"][:4].astype("object")) == [1, 2, 3, pd.NA]
    row = frame.set_index("trial").loc[study.snappy]
    assert (row["objective"], row["objective_2"], bool(row["on_front"])) == (15.0, 90.0, True)
    others = frame.set_index("trial").loc[[study.dominated, study.crashed, study.dup, study.garbage]]
    assert not others["on_front"].any() and others["rank"].isna().all()
    assert others["rank_value"].isna().all() and row["rank_value"] == 15.0  # only the front ranks
    assert list(ranked_frame(study, feasible_only=True)["trial"]) == [study.fast, study.middle, study.snappy]
    with pytest.raises(UserError, match="two objectives"):
        ranked_frame(study, level=4)
    export = build_export_frame(study)
    assert export_dtypes(export)["objective_2"] == "float64" and export_dtypes(export)["on_front"] == "boolean"
    back = pd.read_csv(write_export(export, tmp_path / "x.csv", "csv"), dtype=export_dtypes(export))
    assert back.set_index("trial").loc[study.middle, "objective_2"] == 150.0
    assert back["on_front"].sum() == 3


def test_report_plots_the_two_objectives_and_the_front(study):
    data = build_report_data(study)
    assert data.pareto_axes == ("p99_ttft_ms@c1", "output_throughput@c16")
    assert [p[0] for p in data.pareto_front] == [study.snappy, study.middle, study.fast]  # by latency
    assert {p[0] for p in data.pareto_points} == {study.fast, study.snappy, study.middle, study.dominated}
    report = build_report(study)
    assert "Pareto front: output_throughput@c16 against p99_ttft_ms@c1" in report.markdown
    assert "Two objectives (the Pareto mode)" in report.markdown and "pareto" in report.pngs


def test_importance_reads_the_first_objective(study):
    importances, note = build_param_importances(study)
    assert "for output_throughput@c16" in note and set(importances) == {"tp"}


def test_finalists_of_the_front_get_both_cis_and_a_re_measured_front():
    runs = [("trial 1", [40.0, 300.0]), ("trial 2", [15.0, 90.0]), ("trial 3", [30.0, 320.0]),
            ("trial 1", [42.0, 310.0]), ("trial 2", [16.0, 95.0]), ("trial 3", [31.0, 330.0]),
            ("trial 4", None), ("trial 4", [1.0, 1.0])]
    rows = {r["config"]: r for r in summarize_pareto_finalists(runs)}
    assert rows["trial 1"]["mean"] == 41.0 and rows["trial 1"]["mean_2"] == 305.0
    assert math.isclose(rows["trial 1"]["ci95"], 12.706 * 1.0, rel_tol=1e-3)  # t(1) * sd/sqrt(2)
    assert rows["trial 1"]["on_front"] and rows["trial 2"]["on_front"]
    assert not rows["trial 3"]["on_front"]  # trial 1 beats it on both once re-measured
    assert rows["trial 4"]["failed"] == 1 and rows["trial 4"]["on_front"]  # one good run: its mean


def test_a_duplicate_copies_both_values_and_the_constraints(study):
    original = next(t for t in study.trials if t.number == study.middle)
    crashed = next(t for t in study.trials if t.number == study.crashed)
    study.optimize(lambda trial: _copy_duplicate(trial, original), n_trials=1)
    study.optimize(lambda trial: _copy_duplicate(trial, crashed), n_trials=1)
    copy, crash_copy = study.trials[-2:]
    assert copy.values == [30.0, 150.0] and copy.user_attrs["duplicate_of"] == study.middle
    assert copy.constraints == original.constraints
    assert crash_copy.values == [0.0, 1e12] and crash_copy.constraints["config_fault"] == 1.0
    assert study.middle in {t.number for t in pareto_trials(study)}
    assert copy.number not in {t.number for t in pareto_trials(study)}  # duplicates stay off the front


def test_the_simulators_exact_front_is_the_expert_parallelism_trade_off():
    """On the model EP costs ~2% of the decode step at batch 1 and wins ~15% at batch 16."""
    from sweeper.sim.best import modelled_front

    space = parse_space("""\
name: ep
engine: sim
model: m
parameters:
  tp_size: {type: categorical, choices: [4, 8], flag: --tp-size}
  ep_size: {type: categorical, choices: [1, 4, 8], flag: --ep-size}
  moe_runner_backend: {type: categorical, choices: [flashinfer_mxfp4, triton], flag: --moe-runner-backend}
constraints: [ep_size <= tp_size]
workload: {concurrency: [1, 16]}
objectives:
  - {metric: output_throughput}
  - {metric: p99_itl_ms}
""", "inline")
    front, feasible, total = modelled_front(space)
    assert (feasible, total) == (5, 12)  # triton serves garbage; ep 8 > tp 4 is excluded
    assert [p.config["ep_size"] for p in front] == [8, 4, 1] and {p.config["tp_size"] for p in front} == {8}
    assert [p.throughput for p in front] == sorted(p.throughput for p in front)[::-1]
    assert [p.latency for p in front] == sorted(p.latency for p in front)[::-1]
