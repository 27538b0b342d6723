"""A sweep whose objective is the SLO capacity (max_load_within_slo), against real simulator
processes: each trial searches its load axis, records every level tried, and ranks by what it found."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.support.spaces import ONE_SEED_SPACE

pytestmark = pytest.mark.slow

TINY_WORKLOAD = "workload: {input_len: 64, output_len: 32, concurrency: [1, 4], min_rounds: 2, warmup_rounds: 1}"
# --time-scale 0.1: a modelled ms is 0.1 ms of wall time, so a busy runner's ms of client jitter
# moves a modelled TTFT by 10 ms, not 100 (the SLO verdict is about modelled latency).
CAPACITY_SPACE = (ONE_SEED_SPACE.replace("--time-scale: 0.01", "--time-scale: 0.1")
                  .replace(TINY_WORKLOAD, "workload: {input_len: 64, output_len: 16, concurrency: [1, 4], min_rounds: 2,"
                                          " warmup_rounds: 1, capacity_max_concurrency: 16, max_client_lag_ms: 50}\n"
                                          "objective: {metric: max_load_within_slo}\nslo: {p99_ttft_ms: 450}"))


def test_a_trial_searches_its_capacity_and_ranks_by_it(cli):
    assert "max_load_within_slo" in CAPACITY_SPACE and "--time-scale: 0.1" in CAPACITY_SPACE
    (cli.workdir / "cap.yaml").write_text(CAPACITY_SPACE)
    result = cli.run("sweep", "cap.yaml", "--study", "cap", "--trials", "1", timeout=400)
    assert result.returncode == 0, result.stderr
    [(number, outcome)] = cli.outcomes("cap").items()  # the trial that measured (its infra-fault tries left out)
    record = outcome["capacity"]
    capacity = record["capacity_concurrency"]
    tried = {int(level["load"]): level for level in record["levels"]}
    loads = [int(level["load"]) for level in record["levels"]]
    assert loads[:2] == [1, 2] and len(loads) == len(set(loads))
    # measured: the SLO held at the answer and broke one above it (or held at the ceiling)
    if record["capped"]:
        assert capacity == 16 and tried[16]["slo_holds"]
    else:
        assert 1 <= capacity < 16 and tried[capacity]["slo_holds"] and record["first_failing"] == capacity + 1
        assert not tried[capacity + 1]["slo_holds"] and "p99_ttft_ms" in tried[capacity + 1]["slo_broken_by"][0]
    for load, level in tried.items():  # every level tried is a real measured level with its samples
        assert level["slo_holds"] == (outcome["levels"][str(load)]["p99_ttft_ms"] <= 450)
        assert (cli.workdir / f"results/cap/trials/{number}/samples/c{load}.json").is_file()
    assert outcome["value"] == capacity

    out = cli.run("leaderboard", "cap", "--csv", "cap.csv")
    assert out.returncode == 0, out.stderr
    frame = pd.read_csv(cli.workdir / "cap.csv")
    assert frame.loc[0, "objective"] == capacity and bool(frame.loc[0, "feasible"])
    assert frame.loc[0, "capacity"] == capacity and bool(frame.loc[0, "capacity_capped"]) == record["capped"]
    for load, level in tried.items():  # every load the search measured is a column, not only C = 1, 4
        assert frame.loc[0, f"c{load}_ttft_p99_ms"] == pytest.approx(outcome["levels"][str(load)]["p99_ttft_ms"])
    assert "max_load_within_slo" in out.stdout


def test_max_load_within_slo_without_an_slo_is_one_line(cli):
    (cli.workdir / "noslo.yaml").write_text(CAPACITY_SPACE.replace("slo: {p99_ttft_ms: 450}", ""))
    result = cli.run("sweep", "noslo.yaml", "--study", "x")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "objective.metric: max_load_within_slo needs slo:" in lines[0]
