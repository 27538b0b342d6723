"""A sweep whose levels are open-loop request rates (workload.request_rates), against real
simulator processes: each level records the rate asked and the rate achieved, the objective is
read at a rate level, every config gets the same seeded arrivals, and the leaderboard's CSV has
one set of r<rate>_ columns per rate."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.support.spaces import ONE_SEED_SPACE

pytestmark = pytest.mark.slow

TINY_WORKLOAD = "workload: {input_len: 64, output_len: 32, concurrency: [1, 4], min_rounds: 2, warmup_rounds: 1}"
SECOND_SEED = ("  - name: ep8\n    params: {tp_size: 8, ep_size: 8, moe_runner_backend: marlin, "
               "moe_a2a_backend: none, nccl_proto: LL}\nreference: baseline\n")


def rate_space(arrival: str) -> str:
    """The one-seed tiny space with a second good seed, its ladder two rates; --time-scale 0.1 so
    a busy runner's ms of client jitter moves a modelled send time by 10 ms, not 100."""
    space = (ONE_SEED_SPACE.replace("--time-scale: 0.01", "--time-scale: 0.1")
             .replace("reference: baseline\n", SECOND_SEED, 1)
             .replace(TINY_WORKLOAD, "workload: {input_len: 64, output_len: 16, request_rates: [2, 8], "
                                     f"arrival: {arrival}, warmup_rounds: 1, max_client_lag_ms: 50}}\n"
                                     "objective: {metric: output_throughput, level: 2}"))
    assert "request_rates: [2, 8]" in space and "name: ep8" in space
    return space


def starts(path) -> list[float]:
    """A samples file's send times, from its first."""
    times = sorted(sample["start"] for sample in json.loads(path.read_text()))
    return [t - times[0] for t in times]


def test_a_rate_ladder_records_each_rate_and_ranks_at_one(cli):
    (cli.workdir / "rates.yaml").write_text(rate_space("fixed"))
    result = cli.run("sweep", "rates.yaml", "--study", "rates", "--trials", "2", timeout=400)
    assert result.returncode == 0, result.stderr
    assert "output_throughput@r2" in result.stdout and "rate=8" in result.stdout
    trials = cli.workdir / "results/rates/trials"
    measured = {}
    for number, outcome in cli.outcomes("rates").items():
        trial = trials / str(number)
        measured[number] = outcome
        assert sorted(outcome["levels"]) == ["r2", "r8"]  # no c<C> level: concurrency is not the ladder
        for rate in (2, 8):
            level = outcome["levels"][f"r{rate}"]
            assert level["valid"], level["invalid_reasons"]
            assert level["request_rate"] == rate and level["max_concurrent_requests"] is None
            # evenly spaced sends: the achieved rate (modelled req/s) is the asked one, up to jitter
            assert abs(level["achieved_request_rate"] - rate) < 0.1 * rate, level["achieved_request_rate"]
            assert (trial / f"samples/r{rate}.json").is_file()
        assert outcome["value"] == outcome["levels"]["r2"]["output_throughput"]  # objective level: 2
    assert len(measured) == 2

    out = cli.run("leaderboard", "rates", "--csv", "rates.csv")
    assert out.returncode == 0, out.stderr
    frame = pd.read_csv(cli.workdir / "rates.csv")
    for column in ("r2_output_tok_s", "r8_output_tok_s", "r2_ttft_p99_ms", "r2_valid", "r2_achieved_req_s",
                   "r8_achieved_req_s"):
        assert column in frame.columns, column
    assert not any(column.startswith("c") and column[1].isdigit() for column in frame.columns)
    ranked = frame[frame["rank"].notna()]
    assert len(ranked) == 2 and (ranked["rank_level"] == 2).all()
    assert (ranked["objective"] == ranked["r2_output_tok_s"]).all()
    assert (abs(ranked["r8_achieved_req_s"] - 8) < 0.8).all()

    at8 = cli.run("leaderboard", "rates", "--level", "r8", "--csv", "at8.csv")
    assert at8.returncode == 0, at8.stderr
    by8 = pd.read_csv(cli.workdir / "at8.csv")
    top = by8[by8["rank"].notna()]
    assert (top["rank_level"] == 8).all() and (top["rank_value"] == top["r8_output_tok_s"]).all()
    assert list(top["r8_output_tok_s"]) == sorted(top["r8_output_tok_s"], reverse=True)
    wrong = cli.run("leaderboard", "rates", "--level", "4")
    assert wrong.returncode != 0 and "measured levels 2, 8" in wrong.stderr


def test_every_config_gets_the_same_poisson_arrivals(cli):
    (cli.workdir / "poisson.yaml").write_text(rate_space("poisson"))
    result = cli.run("sweep", "poisson.yaml", "--study", "poisson", "--trials", "2", timeout=400)
    assert result.returncode == 0, result.stderr
    trials = cli.workdir / "results/poisson/trials"
    schedules = [starts(t / "samples/r8.json") for t in sorted(trials.iterdir()) if (t / "samples/r8.json").is_file()]
    assert len(schedules) == 2 and len(schedules[0]) == len(schedules[1]) == 40  # 5 modelled s at 8 req/s
    gaps = [b - a for a, b in zip(schedules[0], schedules[0][1:])]
    assert max(gaps) > 3 * min(gaps)  # Poisson: uneven gaps, not a fixed pace
    # the same seeded schedule for both configs (wall s, time scale 0.1), up to the client's jitter
    assert max(abs(a - b) for a, b in zip(*schedules)) < 0.02


def test_max_load_within_slo_searches_the_rate_from_the_one_given(cli):
    space = (rate_space("fixed").replace("request_rates: [2, 8]", "request_rates: [2]")
             .replace("max_client_lag_ms: 50}", "max_client_lag_ms: 50, capacity_max_rate: 32, "
                                                "capacity_rate_resolution: 0.25}")
             .replace("objective: {metric: output_throughput, level: 2}",
                      "objective: {metric: max_load_within_slo}\nslo: {p99_ttft_ms: 450}"))
    assert "capacity_max_rate: 32" in space and "max_load_within_slo" in space
    (cli.workdir / "ratecap.yaml").write_text(space)
    result = cli.run("sweep", "ratecap.yaml", "--study", "ratecap", "--trials", "1", timeout=400)
    assert result.returncode == 0, result.stderr
    [(number, outcome)] = cli.outcomes("ratecap").items()  # the trial that measured
    trial = cli.workdir / "results/ratecap/trials" / str(number)
    record = outcome["capacity"]
    capacity, loads = record["capacity_rate"], [level["load"] for level in record["levels"]]
    assert "capacity_concurrency" not in record and loads[0] == 2 and len(loads) == len(set(loads))
    tried = {level["load"]: level for level in record["levels"]}
    for load, verdict in tried.items():  # each rate tried is an open-loop level of the trial
        label = f"r{load:g}"
        level = outcome["levels"][label]
        assert level["request_rate"] == load and abs(level["achieved_request_rate"] - load) < 0.1 * load
        assert verdict["slo_holds"] == (level["p99_ttft_ms"] <= 450 and not level["failed"])
        assert (trial / "samples" / f"{label}.json").is_file()
    if record["capped"]:
        assert capacity == 32 and tried[32]["slo_holds"]
    elif capacity > 0:  # held at the answer, broke within a quarter of it above
        assert tried[capacity]["slo_holds"] and not tried[record["first_failing"]]["slo_holds"]
        assert record["first_failing"] - capacity <= 0.25 * capacity
    assert outcome["value"] == capacity

    out = cli.run("leaderboard", "ratecap", "--csv", "ratecap.csv")
    assert out.returncode == 0, out.stderr
    frame = pd.read_csv(cli.workdir / "ratecap.csv")
    assert frame.loc[0, "objective"] == capacity and frame.loc[0, "rank_value"] == capacity
