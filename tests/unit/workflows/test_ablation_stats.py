"""Ablation statistics from scipy.stats: exact t quantiles, Welch's test, and the false discovery
rate held across many levers tested at once."""

import math
import random

import pytest
from scipy import stats

from sweeper.workflows.ablation import Measured, mean_ci, summarize_ablation, t95


@pytest.mark.parametrize("df", [1, 2, 5, 30, 31, 60, 120, 1000])
def test_t_quantiles_are_exact_for_every_df(df):
    assert t95(df) == pytest.approx(stats.t.ppf(0.975, df), rel=1e-12)
    assert t95(df) > 1.96  # the old table's 1.96 above df 30 was too narrow


def test_mean_ci_uses_the_exact_quantile():
    values = [10.0 + 0.1 * i for i in range(40)]
    mean, half = mean_ci(values)
    sem = stats.sem(values)
    assert mean == pytest.approx(sum(values) / 40) and half == pytest.approx(stats.t.ppf(0.975, 39) * sem)


def runs(label, values):
    return [Measured(label, v) for v in values]


def test_a_real_effect_is_found_and_reported_with_its_p():
    ledger = runs("baseline", [100, 101, 99]) + runs("tp=8", [120, 121, 119]) + runs("nccl=LL", [100, 99.5, 100.5])
    rows = {row["lever"]: row for row in summarize_ablation(ledger)}
    assert rows["tp=8"]["verdict"] == "helps" and rows["tp=8"]["p_adjusted"] < 0.05
    assert rows["nccl=LL"]["verdict"] == "within noise"
    assert rows["tp=8"]["p"] == pytest.approx(stats.ttest_ind([120, 121, 119], [100, 101, 99], equal_var=False).pvalue)


def test_many_null_levers_rarely_read_as_effects():
    """27 levers with no effect at all, 3 runs each: without a correction about 27 * 5% = 1.35 levers
    per ablation would read helps/hurts; with Benjamini-Hochberg a false one is rare."""
    rng = random.Random(7)
    false_calls = 0
    for _ in range(40):
        ledger = runs("baseline", [rng.gauss(100, 3) for _ in range(3)])
        for lever in range(27):
            ledger += runs(f"l{lever}=1", [rng.gauss(100, 3) for _ in range(3)])
        false_calls += sum(row["verdict"] != "within noise" for row in summarize_ablation(ledger))
    assert false_calls / 40 < 0.15  # uncorrected it is ~1.35 per ablation


def test_a_broken_lever_is_still_breaks():
    rows = summarize_ablation(runs("baseline", [10, 11]) + [Measured("x=1", None), Measured("x=1", 10)])
    assert rows[0]["verdict"] == "breaks" and math.isnan(rows[0]["delta"] or math.nan)
