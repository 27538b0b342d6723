"""A trial's 95% CI (re-validation, the level's own interval, its repeats, or unknown), ties with
#1 (Welch, else overlap) and ablate's repeats: every number checked against scipy.stats directly."""

import math
import statistics

import numpy as np

import pytest
from scipy import stats

from sweeper.errors import UserError
from sweeper.workflows.ablation import Measured, repeats_for_noise, summarize_finalists
from sweeper.study.confidence import (Estimate, level_estimate, repeats_to_detect, sample_estimate, tie,
                                       trial_estimate, ttest_power, validated_estimate)

A = [1245.0, 1239.0, 1251.0, 1242.0]
B = [1323.0, 1239.0, 1290.0, 1301.0]  # overlaps A's spread: Welch cannot separate them
C = [1400.0, 1405.0, 1398.0, 1402.0]  # far above A


def t_interval(values):
    return stats.t.interval(0.95, len(values) - 1, loc=statistics.fmean(values), scale=stats.sem(values))


def validation_row(values, label="trial 3"):
    return summarize_finalists([Measured(label, v) for v in values])[0]


def test_a_validated_finalist_gets_scipys_t_interval_and_its_spread_back():
    estimate = validated_estimate(validation_row(A))
    low, high = t_interval(A)
    assert (estimate.low, estimate.high) == (pytest.approx(low), pytest.approx(high))
    assert estimate.sd == pytest.approx(statistics.stdev(A)) and estimate.n == 4 and estimate.source == "validation"


def test_a_finalist_with_one_good_run_is_validated_with_an_unknown_interval():
    """It ranks by its fresh launch (as the campaign's verdict does), never by its sweep value."""
    row = summarize_finalists([Measured("trial 1", 10.0), Measured("trial 1", None)])[0]
    estimate = validated_estimate(row)
    assert (estimate.value, estimate.source, estimate.n, estimate.known) == (10.0, "validation", 1, False)
    level = {"output_throughput": 99.0, "valid": True}
    assert trial_estimate(level, "output_throughput", row).value == 10.0
    failed = summarize_finalists([Measured("trial 1", None)])[0]
    assert validated_estimate(failed) is None  # no run succeeded: the level's value, unvalidated
    assert trial_estimate(level, "output_throughput", failed).source == "none"


def test_validation_wins_over_the_level_and_keeps_its_precision_flag():
    level = {"output_throughput": 1300.0, "output_throughput_ci_low": 1290.0, "output_throughput_ci_high": 1310.0,
             "precision_reached": False, "batches": 6}
    estimate = trial_estimate(level, "output_throughput", validation_row(A))
    assert estimate.source == "validation" and estimate.value == pytest.approx(statistics.fmean(A))
    assert estimate.precise is False


def test_the_levels_repeats_give_a_t_interval_from_cv_and_n():
    level = {"output_throughput": 200.0, "repeats": 3, "cv_output_throughput": 0.02}
    estimate = level_estimate(level, "output_throughput")
    low, high = stats.t.interval(0.95, 2, loc=200.0, scale=0.02 * 200.0 / math.sqrt(3))
    assert estimate.source == "repeats" and (estimate.low, estimate.high) == (pytest.approx(low), pytest.approx(high))


def test_a_single_measurement_has_an_unknown_interval_and_other_metrics_ignore_the_throughput_cv():
    assert not level_estimate({"output_throughput": 200.0, "repeats": 1, "cv_output_throughput": 0.0},
                              "output_throughput").known
    estimate = level_estimate({"p99_ttft_ms": 80.0, "repeats": 3, "cv_output_throughput": 0.02}, "p99_ttft_ms")
    assert estimate.source == "none" and estimate.low is None and tie(estimate, estimate).tied is None


def test_a_precision_driven_level_reads_its_recorded_interval_for_any_metric():
    level = {"median_ttft_ms": 50.0, "median_ttft_ms_ci_low": 48.0, "median_ttft_ms_ci_high": 52.5,
             "precision_reached": True}
    estimate = level_estimate(level, "median_ttft_ms")
    assert (estimate.low, estimate.high, estimate.source, estimate.precise) == (48.0, 52.5, "precision", True)


def test_welch_on_batch_means_matches_scipy_on_the_batches_themselves():
    """A precision-driven level records its batch means' interval and count: the tie's p from
    those alone is Welch's p on the batch means."""
    batches = [100.0, 103.0, 98.0, 101.0, 99.5, 102.0]
    low, high = t_interval(batches)
    level = {"output_throughput": statistics.fmean(batches), "output_throughput_ci_low": low,
             "output_throughput_ci_high": high, "batches": len(batches), "precision_reached": True}
    other = sample_estimate(statistics.fmean(C) / 14, statistics.stdev(C) / 14, 4, "validation")
    verdict = tie(level_estimate(level, "output_throughput"), other)
    expected = stats.ttest_ind(batches, [c / 14 for c in C], equal_var=False).pvalue
    assert verdict.rule == "welch" and verdict.p == pytest.approx(expected)


@pytest.mark.parametrize("other, tied", [(B, True), (C, False)])
def test_ties_follow_welchs_test_at_5_percent(other, tied):
    verdict = tie(validated_estimate(validation_row(A)), validated_estimate(validation_row(other)))
    p = stats.ttest_ind(A, other, equal_var=False).pvalue
    assert verdict.rule == "welch" and verdict.p == pytest.approx(p) and verdict.tied == bool(p >= 0.05) == tied


def test_without_samples_overlapping_intervals_tie():
    a = Estimate(100.0, 95.0, 105.0, "precision")
    assert tie(a, Estimate(108.0, 104.0, 112.0, "precision")) == (True, "overlap", None)
    assert tie(a, Estimate(110.0, 106.0, 114.0, "precision")).tied is False


def test_two_noiseless_configs_tie_only_when_equal():
    same = Estimate(10.0, 10.0, 10.0, "repeats", 0.0, 3)
    assert tie(same, same).tied is True and tie(same, Estimate(11.0, 11.0, 11.0, "repeats", 0.0, 3)).tied is False


@pytest.mark.parametrize("effect, n", [(0.5, 64), (0.8, 26), (1.0, 17)])
def test_repeats_match_the_published_two_sample_t_test_sample_sizes(effect, n):
    """Cohen's / G*Power's n per group for a two-sided t test at alpha 0.05, power 0.8."""
    assert repeats_to_detect(0.05 * effect, 0.05, cap=500) == n


def test_power_is_a_number_where_scipys_lower_tail_is_nan():
    """A CI run's ablation pilot had a CV of 0.0028078334892499904: scipy's noncentral t gave nan
    for the far lower tail there, and the power (nan) failed the 0.8 bar at 2 runs."""
    cv = 0.0028078334892499904
    assert ttest_power(0.05 / cv, 2) == pytest.approx(1.0, abs=1e-6) and repeats_to_detect(0.05, cv) == 2
    effects = np.linspace(0.5, 30, 60)
    assert all(0 < ttest_power(e, n) <= 1 for e in effects for n in (2, 3, 5, 10))


def test_the_chosen_repeats_have_the_power_in_a_simulation():
    """2.1% noise, a 5% change: scipy's t test on simulated runs finds it at about the stated
    power with the chosen n, and clearly less often with one run fewer."""
    n = repeats_to_detect(0.05, 0.021)
    rng = np.random.default_rng(3)

    def found(k):
        a, b = rng.normal(100, 2.1, (20000, k)), rng.normal(105, 2.1, (20000, k))
        return float(np.mean(stats.ttest_ind(a, b, axis=1).pvalue < 0.05))

    assert n == 4 and found(n) > 0.78 and found(n - 1) < 0.65
    assert ttest_power(0.05 / 0.021, n) == pytest.approx(found(n), abs=0.015)


def test_ablate_sizes_its_repeats_from_the_baselines_noise_and_says_so():
    pilot = [100.0, 102.1, 97.9]
    chosen = repeats_for_noise(pilot + [None])
    cv = stats.variation(pilot, ddof=1)
    assert chosen["cv"] == pytest.approx(cv) and chosen["repeats"] == repeats_to_detect(0.05, cv)
    assert chosen["note"].startswith(f"repeats: {chosen['repeats']}, chosen to detect a 5% change at the measured "
                                     f"{cv:.1%} noise")
    assert repeats_for_noise([50.0, 50.0])["repeats"] == 2  # noiseless: the fewest a t test takes
    noisy = repeats_for_noise([100.0, 80.0, 120.0])
    assert noisy["repeats"] == 10 and noisy["capped"] and "give --repeats" in noisy["note"]
    with pytest.raises(UserError, match="2 of 3 first runs of the baseline failed"):
        repeats_for_noise([100.0, None, None])
