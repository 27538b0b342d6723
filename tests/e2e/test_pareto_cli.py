"""The two-objective (Pareto) mode through the CLI, on real simulator processes: the front of a
real sweep, validation of its members, resume after Ctrl-C, and a bad objectives block."""

from __future__ import annotations

import json
import os
import signal

import optuna
import pandas as pd
import pytest

from sweeper.search.pareto import dominates
from tests.support.cli import check_failures_retried, server_in_load_stage
from tests.support.ports import free_port, worker_port
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

# The simulator's model: tp=4 is ~15% slower at C=4 and has a ~19% longer decode step at C=1 than
# tp=8 (dominated on both); ep trades C=4 throughput for C=1 step time; triton is garbage output.
PARETO = """\
name: pareto
engine: sim
model: deepseek-ai/DeepSeek-V4-Flash
fixed_flags: {--time-scale: 0.05, --load-seconds: 10}
parameters:
  tp_size: {type: categorical, choices: [4, 8], flag: --tp-size}
  ep_size: {type: categorical, choices: [1, 4], flag: --ep-size}
  moe_runner_backend: {type: categorical, choices: [marlin, triton], flag: --moe-runner-backend}
seeds:
  - name: baseline
    params: {tp_size: 8, ep_size: 1, moe_runner_backend: marlin}
reference: baseline
workload: {input_len: 64, output_len: 16, concurrency: [1, 4], min_rounds: 2, warmup_rounds: 1}
objectives:
  - {metric: output_throughput}
  - {metric: median_itl_ms}
budget: {trials: 8}
launch: {ready_timeout_s: 60, stall_timeout_s: 5, stop_grace_s: 5}
"""


@pytest.fixture
def cli(cli):
    """Servers on ports of their own: other suites running at once on this machine use 31000 up,
    and a port taken between the free-port check and the launch fails a trial (port_busy)."""
    hosts = cli.workdir / "hosts.yaml"
    hosts.write_text(hosts.read_text().replace(f"base_port: {worker_port(31000)}", f"base_port: {free_port()}"))
    return cli


def check_front(frame: pd.DataFrame, study: optuna.Study) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The front of the export is exactly the non-dominated feasible trials, and agrees with
    Optuna's own front (constraints considered; duplicates left out). Returns (front, dominated)."""
    up_down = (True, False)
    feasible = frame[frame["feasible"]]
    front = frame[frame["on_front"]]
    assert len(front) >= 1 and front["feasible"].all()
    assert not frame[~frame["feasible"]]["on_front"].any()
    points = {int(r.trial): (r.objective, r.objective_2) for r in feasible.itertuples()}
    for number in front["trial"]:
        assert not any(dominates(p, points[number], up_down) for p in points.values()), number
    dominated = feasible[~feasible["on_front"]]
    for number in dominated["trial"]:
        assert any(dominates(points[f], points[number], up_down) for f in front["trial"]), number
    optuna_front = {t.number for t in study.best_trials if "duplicate_of" not in t.user_attrs}
    assert optuna_front == set(front["trial"])
    assert list(front["rank"]) == list(range(1, len(front) + 1))  # ranked by throughput
    assert list(front["objective"]) == sorted(front["objective"], reverse=True)
    return front, dominated


def test_a_pareto_sweep_gives_a_front_of_feasible_non_dominated_trials(cli):
    (cli.workdir / "pareto.yaml").write_text(PARETO)
    result = cli.run("sweep", "pareto.yaml", "--study", "pf", "--sampler", "brute", timeout=600)
    assert result.returncode == 0, result.stderr
    assert "Pareto front of output_throughput@c4 (higher is better) and median_itl_ms@c1" in result.stdout

    assert cli.run("leaderboard", "pf", "--csv", "pf.csv", "--json-file", "pf.json").returncode == 0
    frame = pd.read_csv(cli.workdir / "pf.csv")
    study = cli.study("pf")
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    assert study.metric_names == ["output_throughput@c4", "median_itl_ms@c1"]
    front, dominated = check_front(frame, study)
    assert not frame[frame["param_moe_runner_backend"] == "triton"]["feasible"].any()  # garbage output
    # tp=4 is dominated by tp=8 (when measured validly: a busy machine can fail a level for client lag)
    tp4 = frame[(frame["param_tp_size"] == 4) & frame["feasible"]]
    assert set(tp4["trial"]) <= set(dominated["trial"])
    # both values in every export, equal to what the trials measured
    records = {r["trial"]: r for r in json.loads((cli.workdir / "pf.json").read_text())}
    for t in study.get_trials(deepcopy=False):
        if t.number in set(front["trial"]):
            levels = t.user_attrs["levels"]
            assert records[t.number]["objective"] == pytest.approx(levels["4"]["output_throughput"])
            assert records[t.number]["objective_2"] == pytest.approx(levels["1"]["median_itl_ms"])

    best = cli.run("best", "pf")
    on_front = f"{len(front)} config{'s' if len(front) > 1 else ''} on the front"
    assert best.returncode == 0 and on_front in " ".join(best.stdout.split())
    script = cli.run("best", "pf", "--script", "--trial", str(int(front["trial"].iloc[-1])))
    assert script.returncode == 0 and "median_itl_ms@c1 = " in script.stdout and "--tp-size 8" in script.stdout
    refused = cli.run("best", "pf", "--trial", str(int(frame[~frame["feasible"]]["trial"].iloc[0])))
    assert refused.returncode == 2 and "not a feasible trial" in refused.stderr
    assert cli.run("report", "pf").returncode == 0
    markdown = (cli.workdir / "results/pf/report.md").read_text()
    assert "Pareto front: output_throughput@c4 against median_itl_ms@c1" in markdown
    assert (cli.workdir / "results/pf/figures/pareto.png").stat().st_size > 10_000

    # validation re-runs the front's members from the study's stored space (the file is gone)
    (cli.workdir / "pareto.yaml").unlink()
    result = cli.run("validate", "pf", "--top", "2", "--repeats", "2", timeout=600)
    assert result.returncode == 0, result.stderr
    assert "front after re-run: trial" in result.stdout
    rows = cli.study("pf").user_attrs["validation"]["rows"]
    assert {r["config"] for r in rows} == {f"trial {n}" for n in front["trial"][:2]}
    assert all(r["runs"] == 2 and r["mean"] > 0 and r["mean_2"] > 0 for r in rows if r["failed"] == 0)


def test_a_pareto_study_resumes_after_ctrl_c_with_both_objectives(cli):
    space = PARETO.replace("{metric: median_itl_ms}", "{metric: p99_ttft_ms}").replace("trials: 8", "trials: 4")
    (cli.workdir / "resume.yaml").write_text(space)
    controller = cli.start("sweep", "resume.yaml", "--study", "pr", "--sampler", "random", "--seed", "1")
    wait_for(lambda: server_in_load_stage(cli.workdir, "pr"), timeout=180)
    os.kill(controller.pid, signal.SIGINT)
    controller.communicate(timeout=120)
    assert controller.returncode == 130

    result = cli.run("resume", "pr", timeout=600)
    assert result.returncode == 0, result.stderr
    assert "Pareto front of output_throughput@c4 (higher is better) and p99_ttft_ms@c1" in result.stdout
    study = cli.study("pr")
    assert len(study.directions) == 2
    assert cli.run("leaderboard", "pr", "--csv", "pr.csv").returncode == 0
    frame = pd.read_csv(cli.workdir / "pr.csv")
    check_failures_retried(study.trials, interrupted=1)
    launched = frame[(frame["state"] == "COMPLETE") & frame["duplicate_of"].isna()]
    assert len(launched) == 4  # the budget in real evaluations, across the two runs
    keys = launched[["param_tp_size", "param_ep_size", "param_moe_runner_backend"]].astype(str).agg(",".join, axis=1)
    assert keys.is_unique  # dedupe held across resume
    duplicates = frame[frame["duplicate_of"].notna()]
    assert not duplicates["on_front"].any()
    check_front(frame, study)


def test_a_bad_objectives_block_stops_before_anything_starts(cli):
    (cli.workdir / "bad.yaml").write_text(PARETO.replace("{metric: median_itl_ms}", "{metric: request_throughput}"))
    result = cli.run("sweep", "bad.yaml", "--study", "bad")
    assert result.returncode == 2
    assert "bad.yaml:16: objectives[1].metric: objective 2 must be a latency to minimise" in result.stderr
    assert not (cli.workdir / "results" / "bad").exists()
