"""Results people read, from storage alone: ranking at any level, typed exports that round-trip,
the gap to target, parameter importance, and the report's pure builders."""

from __future__ import annotations

import base64
import io
import math
import re

import matplotlib.image
import numpy as np
import optuna
import pandas as pd
import pytest

from sweeper.spec.space import Target
from sweeper.spec.space_file import parse_space
from sweeper.errors import ConfigError, UserError
from sweeper.results.export import EXPORT_FORMATS, build_export_frame, export_dtypes, write_export
from sweeper.results.figures import FIG_PIXELS
from sweeper.results.gap import build_gap_to_target, format_gap_lines, needed_step_ms
from sweeper.results.importance import MIN_TRIALS, build_param_importances
from sweeper.results.ranking import best_ranked_trial, ranked_frame
from sweeper.results.report import build_report, write_report
from sweeper.results.report_data import build_budget_by_strategy, build_report_data, pareto_front, strategy_of

SPACE_TEXT = """\
name: t
engine: sim
model: m
parameters:
  tp: {type: categorical, choices: [4, 8], flag: --tp-size}
  graphs: {type: bool, flag: --disable-cuda-graph}
  max_bs: {type: categorical, choices: [8, 16], flag: --cuda-graph-max-bs, when: {graphs: false}}
  proto: {type: categorical, choices: ["0", "1"], env: NCCL_P2P_DISABLE}
workload: {concurrency: [1, 16]}
objective: {metric: output_throughput, level: 16}
target: {metric: output_throughput, value: 1000, level: 16}
"""
SPACE = parse_space(SPACE_TEXT, "inline")
DISTRIBUTIONS = {
    "tp": optuna.distributions.CategoricalDistribution([4, 8]),
    "graphs": optuna.distributions.CategoricalDistribution([False, True]),
    "max_bs": optuna.distributions.CategoricalDistribution([8, 16]),
    "proto": optuna.distributions.CategoricalDistribution(["0", "1"]),
}


def level(tok_s: float, itl: float = 500.0, ttft: float = 800.0, valid: bool = True) -> dict:
    return {"output_throughput": tok_s, "median_ttft_ms": ttft, "p90_ttft_ms": ttft * 1.2,
            "p99_ttft_ms": ttft * 1.3, "median_itl_ms": itl, "p90_itl_ms": itl * 1.1,
            "p99_itl_ms": itl * 1.2, "valid": valid}


def make_study() -> optuna.Study:
    study = optuna.create_study(direction="maximize", study_name="unit")
    study.set_user_attr("space", SPACE.model_dump(mode="json"))
    study.set_user_attr("space_text", SPACE_TEXT)
    study.set_user_attr("sweeper_version", "0.1.0")
    study.set_user_attr("host_name", "local")
    study.set_user_attr("engine_version", "0.1.0")
    study.set_user_attr("gpu_model", "simulated GPU")
    return study


def record(study, params: dict, value: float, levels: dict | None = None, **attrs) -> int:
    trial = study.ask({k: DISTRIBUTIONS[k] for k in params})
    assert trial.params == params
    attrs = {"launched": True, "levels": {str(c): m for c, m in (levels or {}).items()},
             "stage_seconds": {"preflight": 0.01, "launch": 0.1, "wait_ready": 2.0, "load": 3.0, "stop": 0.2},
             "output_text": "Paris", **attrs}
    for key, val in attrs.items():
        trial.set_user_attr(key, val)
    study.tell(trial, value)
    return trial.number


def fixed(study, params: dict, value: float, levels=None, **attrs) -> int:
    """Record a trial with exactly these params (enqueued, so ask() returns them)."""
    study.enqueue_trial(params)
    return record(study, params, value, levels, **attrs)


@pytest.fixture
def study() -> optuna.Study:
    s = make_study()
    fixed(s, {"tp": 8, "graphs": False, "max_bs": 16, "proto": "1"}, 24.0, {1: level(10.0, 95), 16: level(24.0, 650)})
    fixed(s, {"tp": 8, "graphs": False, "max_bs": 8, "proto": "0"}, 26.0, {1: level(9.0, 100), 16: level(26.0, 600, 900)})
    fixed(s, {"tp": 4, "graphs": True, "proto": "1"}, 20.0, {1: level(11.0, 90), 16: level(20.0, 780, 700)})
    fixed(s, {"tp": 4, "graphs": False, "max_bs": 8, "proto": "0"}, 30.0,  # invalid at 16: never ranks there
          {1: level(8.0, 120), 16: level(30.0, 500, valid=False)})
    fixed(s, {"tp": 8, "graphs": True, "proto": "0"}, 0.0, {},
          failure={"stage": "wait_ready", "kind": "oom", "message": "CUDA out of memory", "log_tail": ""})
    fixed(s, {"tp": 8, "graphs": False, "max_bs": 8, "proto": "0"}, 26.0, {}, duplicate_of=1, launched=False)
    s.set_user_attr("reference_text", "Paris")
    return s


def test_ranking_skips_duplicates_failures_and_invalid_levels(study):
    frame = ranked_frame(study)
    ranked = frame[frame["rank"].notna()]
    assert list(ranked["trial"]) == [1, 0, 2] and list(ranked["rank"]) == [1, 2, 3]
    assert frame.set_index("trial").loc[3, "feasible"]  # feasible, but its C=16 is invalid: no rank
    assert pd.isna(frame.set_index("trial").loc[3, "rank"])
    assert best_ranked_trial(study).number == 1


def test_ranking_by_another_level_and_filters(study):
    frame = ranked_frame(study, level=1, feasible_only=True)
    assert list(frame["trial"]) == [2, 0, 1, 3]  # at C=1 trial 3 is valid and ranks (last)
    assert set(frame["rank_level"]) == {1}
    export = build_export_frame(study, level=1, feasible_only=True, top=2)
    assert list(export["trial"]) == [2, 0] and list(export["rank_value"]) == [11.0, 10.0]
    with pytest.raises(UserError, match="--level 3: study 'unit' measured levels 1, 16"):
        ranked_frame(study, level=3)


def test_exports_round_trip_with_equal_content(study, tmp_path):
    frame = build_export_frame(study)
    assert frame["trial"].is_unique and len(frame) == 6
    assert frame.loc[0, "engine_version"] == "0.1.0" and frame.loc[0, "gpu_model"] == "simulated GPU"
    assert frame.loc[0, "study"] == "unit" and frame.loc[0, "engine"] == "sim"
    assert pd.isna(frame.set_index("trial").loc[2, "param_max_bs"])  # its condition was off
    assert str(frame["param_proto"].dtype) == "string"  # "0"/"1" stay strings
    assert str(frame["duplicate_of"].dtype) == "Int64"
    dtypes = export_dtypes(frame)
    readers = {"csv": lambda p: pd.read_csv(p, dtype=dtypes),
               "json": lambda p: pd.read_json(p, orient="records", dtype=dtypes),
               "parquet": pd.read_parquet}
    for fmt in EXPORT_FORMATS:
        path = write_export(frame, tmp_path / f"lb.{fmt}", fmt)
        pd.testing.assert_frame_equal(readers[fmt](path), frame, check_exact=False, rtol=1e-12)


def test_gap_to_target_in_step_time():
    assert needed_step_ms("output_throughput", 1000, 16) == 16.0
    assert needed_step_ms("median_itl_ms", 20, 16) == 20 and needed_step_ms("p99_ttft_ms", 1, 16) is None
    gap = build_gap_to_target(Target(value=1000, level=16), 16, 7, {"1": level(10.0, 95.0),
                              "16": level(25.0, 688.0)}, [1, 16], {"attention": 0.63, "moe": 0.37})
    assert gap.step_ms == 688.0 and gap.needed_step_ms == 16.0 and gap.step_speedup == pytest.approx(43.0)
    assert gap.shortfall == pytest.approx(40.0) and [s.level for s in gap.steps] == [1, 16]
    assert gap.kernels[0].group == "attention" and gap.kernels[0].step_ms == pytest.approx(433.44)
    text = "\n".join(format_gap_lines(gap))
    assert "step needed at C=16: 16.0 ms (have 688.0 ms): 43.0x faster steps missing" in text
    assert "attention 63% (433 ms)" in text
    # an invalid level gives no step and no measured value
    empty = build_gap_to_target(Target(value=1000), 16, 7, {"16": level(25.0, valid=False)}, [16])
    assert empty.step_ms is None and empty.measured_value is None and empty.step_speedup is None


def test_target_key_in_the_space_file():
    assert SPACE.perf_target == Target(metric="output_throughput", value=1000, level=16)
    with pytest.raises(ConfigError, match=r"inline:11: target.level: 3 is not one of workload.concurrency"):
        parse_space(SPACE_TEXT.replace("level: 16}\n", "level: 3}\n").replace(
            "objective: {metric: output_throughput, level: 3}", "objective: {metric: output_throughput, level: 16}"), "inline")
    with pytest.raises(ConfigError, match=r"inline:11: target.goal: unknown key"):
        parse_space(SPACE_TEXT.replace("value: 1000", "value: 1000, goal: 1"), "inline")


def test_importance_needs_enough_feasible_trials(study):
    importances, note = build_param_importances(make_study())
    assert importances == {} and f"at least {MIN_TRIALS}" in note
    importances, note = build_param_importances(study)  # 4 feasible (one with an invalid level)
    assert set(importances) <= {"tp", "graphs", "proto"} and importances
    assert math.isclose(sum(importances.values()), 1.0, rel_tol=1e-6)


def test_pareto_front_keeps_only_undominated_points():
    points = [(1, 900.0, 26.0), (2, 700.0, 20.0), (3, 800.0, 19.0), (4, 1000.0, 25.0), (5, 650.0, 10.0)]
    assert pareto_front(points) == [(5, 650.0, 10.0), (2, 700.0, 20.0), (1, 900.0, 26.0)]


def _pngs(html: str) -> list[np.ndarray]:
    return [matplotlib.image.imread(io.BytesIO(base64.b64decode(b)), format="png")
            for b in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)]


def test_report_sections_plots_and_optional_parts(study, tmp_path):
    study.set_user_attr("kernel_profile", {"attention": 0.63, "moe": 0.3, "dense": 0.07})
    study.set_user_attr("ablation", [{"change": "ep 1 -> 8", "tok_s": 26.0, "delta": "+13%"}])
    report = build_report(study)
    images = _pngs(report.html)
    assert len(images) == 7
    for image in images:
        assert image.shape[:2] == (FIG_PIXELS[1], FIG_PIXELS[0]) and image.std() > 0.01
    for needle in ("Gap to target", "step needed at C=16: 16.0 ms (have 600.0 ms): 37.5x faster steps missing",
                   "attention", "Ablation", "ep 1 -&gt; 8", "wait_ready", "oom", "Pareto front",
                   "Parameter importance", "Timeline of the sweep", "simulated GPU"):
        assert needle in report.html, needle
    assert "ep 1 -> 8" in report.markdown and "![Throughput" in report.markdown
    written = write_report(report, tmp_path)
    assert {p.name for p in written} >= {"report.html", "report.md", "throughput.png", "timeline.png"}
    for link in re.findall(r"\]\((figures/[a-z]+\.png)\)", report.markdown):
        assert (tmp_path / link).is_file()


def test_the_serving_trade_off_takes_every_feasible_valid_level_with_a_gpu_count():
    study = make_study()
    fair = lambda tok_s, user, gpu: {**level(tok_s), "output_throughput_per_user": user,  # noqa: E731
                                     "output_throughput_per_gpu": gpu}
    fixed(study, {"tp": 8, "graphs": False, "max_bs": 16, "proto": "1"}, 24.0,
          {1: fair(10.0, 10.0, 1.25), 16: fair(24.0, 1.6, 3.0)})
    fixed(study, {"tp": 4, "graphs": True, "proto": "1"}, 20.0,
          {1: fair(11.0, 11.0, 2.75), 16: {**fair(20.0, 1.3, 5.0), "valid": False}})
    fixed(study, {"tp": 4, "graphs": False, "max_bs": 8, "proto": "0"}, 30.0, {1: level(8.0), 16: level(30.0)})
    data = build_report_data(study)
    assert sorted(data.serving_points) == [(0, 1, 10.0, 1.25), (0, 16, 1.6, 3.0), (1, 1, 11.0, 2.75)]
    html = build_report(study).html
    assert "Serving trade-off" in html and "3 levels of 2 feasible configs" in html
    frame = build_export_frame(study)
    assert list(frame.set_index("trial").loc[[0, 2], "c16_output_tok_s_per_gpu"].fillna(-1)) == [3.0, -1]


def test_report_of_a_study_without_results_still_builds():
    study = make_study()
    report = build_report(study)
    assert len(_pngs(report.html)) == 7 and "Gap to target" not in report.html
    assert "Ablation" not in report.html and "needs at least" in report.html


def test_the_report_says_how_the_search_spent_its_trials():
    s = make_study()
    lever = "gp: 1 lever from trial {} (expected +3.1% on trial {}'s estimate, 96% to run)"
    fixed(s, {"tp": 8, "graphs": False, "max_bs": 16, "proto": "1"}, 24.0, {16: level(24.0)},
          proposed_by="seed case-study-baseline")
    fixed(s, {"tp": 8, "graphs": False, "max_bs": 8, "proto": "0"}, 26.0, {16: level(26.0)},
          proposed_by=lever.format(0, 0))
    fixed(s, {"tp": 8, "graphs": True, "proto": "0"}, 0.0, {}, proposed_by=lever.format(1, 1),
          failure={"stage": "wait_ready", "kind": "oom", "message": "CUDA out of memory", "log_tail": ""})
    fixed(s, {"tp": 4, "graphs": True, "proto": "1"}, 20.0, {16: level(20.0)},
          proposed_by="gp: exploration (expected -2.0% on trial 1's estimate, 90% to run)")
    fixed(s, {"tp": 8, "graphs": False, "max_bs": 8, "proto": "0"}, 26.0, {}, duplicate_of=1, launched=False,
          proposed_by="gp: exploration (expected +0.1% on trial 1's estimate, 99% to run)")
    budget = build_budget_by_strategy(build_report_data(s).timeline)
    assert [(b.strategy, b.trials, b.ran, b.failed, b.duplicates) for b in budget] == [
        ("seed", [0], 1, 0, 0), ("gp: 1 lever from trial N", [1, 2], 1, 1, 0), ("gp: exploration", [3, 4], 1, 0, 1)]
    report = build_report(s)
    assert "The best, trial 1, was proposed by: gp: 1 lever from trial 0" in report.markdown
    assert "gp: 1 lever from trial N" in report.html


@pytest.mark.parametrize("label, strategy", [
    ("seed case-study-baseline", "seed"),
    ("gp: space-filling start", "gp: space-filling start"),
    ("gp: nothing ran yet; likeliest to run (14%)", "gp: nothing ran yet; likeliest to run"),
    ("gp: 2 levers from trial 12 (expected +3.1% on trial 12's estimate, 96% to run)", "gp: 2 levers from trial N"),
    ("tp_size=4 from trial 3", "1 lever from trial N"),
    ("tp_size=4, ep_size=2 from trial 17 (levers that came closest)", "2 levers from trial N"),
    ("retry of trial 7", "retry of trial N"),
    ("", "-"),
])
def test_a_strategy_is_its_label_without_particulars(label, strategy):
    assert strategy_of(label) == strategy
