"""The real CLI on a simulator study: leaderboard (table, CSV, JSON, Parquet), `show --json` and
`best --json` carry each ranked value's 95% CI and the tie with #1, first from the levels'
repeats, then from `validate`'s re-runs; every number is recomputed here with scipy.stats. And
`ablate` without --repeats sizes them to the noise of the baseline's first runs."""

import json
import math

import optuna
import pandas as pd
import pytest
from scipy import stats

from sweeper.study.confidence import repeats_to_detect
from sweeper.study.store import load_study
from sweeper.study.runs import measured_runs
from tests.support.ports import free_port, worker_port

pytestmark = pytest.mark.slow

# Three configs the simulator cannot tell apart (it ignores the twin's env var): the top is a tie
# unless noise alone separates them.
TWINS = """\
name: twins
engine: sim
model: deepseek-ai/DeepSeek-V4-Flash
fixed_flags: {--time-scale: 0.01, --load-seconds: 30}
parameters:
  tp_size: {type: categorical, choices: [8], flag: --tp-size}
  ep_size: {type: categorical, choices: [8], flag: --ep-size}
  twin: {type: categorical, choices: [a, b, c], env: SWEEPER_TEST_TWIN}
seeds:
  - name: base
    params: {tp_size: 8, ep_size: 8, twin: a}
# a light load with long requests and a lenient client-lag bar: valid on a busy 2-core runner,
# where the client's own turnaround and lag would otherwise spoil the levels this test reads
workload: {input_len: 64, output_len: 64, concurrency: [2], min_rounds: 2, warmup_rounds: 1,
           max_client_lag_ms: 100, repeats: 2}
launch: {ready_timeout_s: 60, stall_timeout_s: 5, stop_grace_s: 5}
"""


def read_exports(cli, study):
    result = cli.run("leaderboard", study, "--csv", "r.csv", "--json-file", "r.json", "--parquet", "r.parquet")
    assert result.returncode == 0, result.stderr
    frames = [pd.read_csv(cli.workdir / "r.csv"), pd.read_json(cli.workdir / "r.json"),
              pd.read_parquet(cli.workdir / "r.parquet")]
    for frame in frames[:2]:  # the three formats say the same (JSON keeps 10 significant digits)
        for column in ("trial", "ci_source", "tied_with_best"):
            assert [None if pd.isna(v) else v for v in frame[column]] == \
                   [None if pd.isna(v) else v for v in frames[2][column]], column
        for column in ("ci_low", "ci_high"):
            assert list(frame[column]) == pytest.approx(list(frames[2][column]), rel=1e-9, nan_ok=True), column
    ranked = frames[2][frames[2]["rank"].notna()].reset_index(drop=True)
    return result.stdout, ranked


def check_ties_and_json(cli, study, table, ranked, samples):
    """tied_with_best is Welch's verdict (scipy, from each row's samples) against #1, and the
    table, show --json and best --json name the same tied trials. Against a validated #1 the tie
    of a config measured only in the sweep is unknown (one launch's spread, not launch-to-launch)."""
    best = samples[int(ranked.loc[0, "trial"])]
    tied = []
    for _, row in ranked.iloc[1:].iterrows():
        if (ranked.loc[0, "validated"] and not row["validated"]) or int(row["trial"]) not in samples:
            assert pd.isna(row["tied_with_best"]), row  # unknown (or re-run once: its interval is)
            continue
        mean, sd, n = samples[int(row["trial"])]
        p = stats.ttest_ind_from_stats(best[0], best[1], best[2], mean, sd, n, equal_var=False).pvalue
        assert bool(row["tied_with_best"]) == bool(p >= 0.05), (row["trial"], p)
        tied += [int(row["trial"])] if p >= 0.05 else []
    assert ("tied with #1" in table) == bool(tied)
    shown = json.loads(cli.run("show", study, "--json").stdout)["best"][0]
    best_json = json.loads(cli.run("best", study, "--json").stdout)
    for record in (shown, best_json):
        assert record["trial"] == ranked.loc[0, "trial"] and record["tied_with"] == tied
        assert record["ci_low"] == pytest.approx(ranked.loc[0, "ci_low"])
        assert record["ci_high"] == pytest.approx(ranked.loc[0, "ci_high"])
    return best_json


def test_leaderboard_show_and_best_carry_cis_and_ties_before_and_after_validation(cli):
    (cli.workdir / "twins.yaml").write_text(TWINS)
    hosts = cli.workdir / "hosts.yaml"  # ports of its own, away from other suites' servers
    hosts.write_text(hosts.read_text().replace(f"base_port: {worker_port(31000)}", f"base_port: {free_port()}"))
    result = cli.run("sweep", "twins.yaml", "--study", "r", "--sampler", "brute", "--trials", "3")
    assert result.returncode == 0, result.stderr
    table, ranked = read_exports(cli, "r")
    assert "95% CI" in table and len(ranked) >= 2
    study = optuna.load_study(study_name="r", storage=f"sqlite:///{cli.workdir}/results/r/study.db")
    levels = {t.number: t.user_attrs["levels"]["2"] for t in study.trials if "levels" in t.user_attrs}
    samples = {}
    for _, row in ranked.iterrows():  # the levels' repeats: value ± t(n-1) * CV * value / sqrt(n)
        m = levels[int(row["trial"])]
        value, n, sd = m["output_throughput"], m["repeats"], m["cv_output_throughput"] * m["output_throughput"]
        low, high = stats.t.interval(0.95, n - 1, loc=value, scale=sd / math.sqrt(n))
        assert row["ci_source"] == "repeats" and n == 2
        assert (row["ci_low"], row["ci_high"]) == (pytest.approx(low), pytest.approx(high))
        samples[int(row["trial"])] = (value, sd, n)
    best = check_ties_and_json(cli, "r", table, ranked, samples)
    assert best["validated"] is False

    result = cli.run("validate", "r", "--top", "2", "--repeats", "2")
    assert result.returncode == 0, result.stderr
    table, ranked = read_exports(cli, "r")
    reruns = {}
    validation = optuna.load_study(study_name="r", storage=f"sqlite:///{cli.workdir}/results/r/study.db")
    for label, value in measured_runs(load_study(validation.user_attrs["validation"]["study"],
                                                 cli.workdir / "results", None)):
        if value is not None:
            reruns.setdefault(int(label.split()[-1]), []).append(value)
    validated = ranked[ranked["ci_source"] == "validation"]
    assert set(validated["trial"]) == set(reruns) and len(validated) >= 1
    assert list(ranked["validated"]) == sorted(ranked["validated"], reverse=True)  # validated first
    for _, row in validated[[len(reruns[int(t)]) >= 2 for t in validated["trial"]]].iterrows():
        values = reruns[int(row["trial"])]  # the re-runs' t interval; they rank by their mean
        low, high = stats.t.interval(0.95, len(values) - 1, loc=sum(values) / len(values), scale=stats.sem(values))
        assert (row["ci_low"], row["ci_high"]) == (pytest.approx(low), pytest.approx(high))
        assert row["rank_value"] == pytest.approx(sum(values) / len(values))
        samples[int(row["trial"])] = (sum(values) / len(values), float(pd.Series(values).std()), len(values))
    best = check_ties_and_json(cli, "r", table, ranked, samples)
    assert best["validated"] is (ranked.loc[0, "ci_source"] == "validation")


def test_ablate_without_repeats_sizes_them_to_the_baselines_noise_and_says_so(cli):
    (cli.workdir / "abl.yaml").write_text(TWINS.replace("choices: [a, b, c]", "choices: [a, b]")
                                          .replace(",\n           max_client_lag_ms: 100, repeats: 2}", ", max_client_lag_ms: 100}"))
    hosts = cli.workdir / "hosts.yaml"
    hosts.write_text(hosts.read_text().replace(f"base_port: {worker_port(31000)}", f"base_port: {free_port()}"))
    result = cli.run("ablate", "abl.yaml", "--baseline", "base", "--study", "ab")
    assert result.returncode == 0, result.stderr
    study = optuna.load_study(study_name="ab", storage=f"sqlite:///{cli.workdir}/results/ab/study.db")
    runs = sorted((t for t in study.trials if "label" in t.user_attrs), key=lambda t: t.number)
    pilot = [t.values[0] for t in runs[:3] if t.user_attrs.get("levels", {}).get("2", {}).get("valid")]
    cv = stats.variation(pilot, ddof=1)
    chosen = study.user_attrs["ablation_repeats"]
    assert chosen["cv"] == pytest.approx(cv) and chosen["repeats"] == repeats_to_detect(0.05, cv)
    n = chosen["repeats"]
    assert f"repeats: {n}, chosen to detect a 5% change at the measured {cv:.1%} noise" in result.stdout
    labels = [t.user_attrs["label"] for t in runs]
    assert labels[:3] == ["baseline"] * 3 and labels[3:] == ["baseline", "twin=b"] * n  # then interleaved
    assert study.user_attrs["budget"] == 3 + 2 * n
