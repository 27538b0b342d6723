"""How sure a ranked value is: one trial's 95% confidence interval, whether two configs are
statistically tied, and how many repeats detect a given change. Pure (plain data in, plain data
out); every surface (leaderboard, show, best, exports, report, ablate) calls these.

A trial's interval comes from, in order:
1. `validation`: the finalists' re-runs on fresh servers (`sweeper validate`): a Student t
   interval over the runs' values;
2. `precision`: the level's own interval, recorded by a precision-driven measurement
   (`<metric>_ci_low`, `<metric>_ci_high`, `batches`, `precision_reached`);
3. `repeats`: the level's repeats (`repeats`, `cv_output_throughput`): a t interval from the CV
   and n (output throughput only: the other metrics' spread is not recorded);
4. `none`: unknown, and shown as unknown, never as precise.

Statistics from scipy.stats, imported inside the functions (CLI start-up time)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping, NamedTuple

ALPHA = 0.05  # 95% intervals; ties at 5%
POWER = 0.8  # ablate: the chance to detect the change it is sized for
MAX_REPEATS = 10  # ablate: no more runs per arm than this, whatever the noise


def t95(df: float) -> float:
    """The two-sided 95% Student t quantile (inf below one degree of freedom)."""
    from scipy import stats  # here: importing scipy.stats costs every command ~1 s of start-up

    return math.inf if df < 1 else float(stats.t.ppf(1 - ALPHA / 2, df))


@dataclass(frozen=True)
class Estimate:
    """A ranked value with its 95% interval (low/high None when unknown). `sd` and `n` (the spread
    of one sample and how many) are known when the interval came from samples; Welch's test
    needs them."""

    value: float
    low: float | None = None
    high: float | None = None
    source: str = "none"  # validation | precision | repeats | none
    sd: float | None = None
    n: int | None = None
    precise: bool | None = None  # the level's precision_reached, where recorded

    @property
    def known(self) -> bool:
        return self.low is not None and self.high is not None


def sample_estimate(value: float, sd: float, n: int, source: str) -> Estimate:
    """value ± t(n-1) sd / sqrt(n)."""
    half = t95(n - 1) * sd / math.sqrt(n)
    return Estimate(value, value - half, value + half, source, sd, n)


def validated_estimate(row: Mapping[str, Any]) -> Estimate | None:
    """A finalist's re-validation (a row of `summarize_finalists`: mean, ci95 over runs - failed
    values); None when no run succeeded. One good run is a validated value with an unknown
    interval: it ranks by that fresh launch (as the campaign's verdict does), never by its sweep value."""
    n = int(row.get("runs") or 0) - int(row.get("failed") or 0)
    mean, half = row.get("mean"), row.get("ci95")
    if mean is None or n < 1:
        return None
    if n < 2 or half is None or not math.isfinite(half):
        return Estimate(float(mean), source="validation", n=n)
    sd = half * math.sqrt(n) / t95(n - 1)  # the interval's own sample spread, for Welch
    return Estimate(float(mean), mean - half, mean + half, "validation", sd, n)


def level_estimate(metrics: Mapping[str, Any], metric: str) -> Estimate:
    """The level's value of `metric` with the interval its measurement recorded (precision-driven
    keys, else repeats), else unknown."""
    value = float(metrics[metric])
    reached = metrics.get("precision_reached")
    precise = bool(reached) if reached is not None else None
    low, high = metrics.get(f"{metric}_ci_low"), metrics.get(f"{metric}_ci_high")
    if low is not None and high is not None and math.isfinite(low) and math.isfinite(high):
        batches = int(metrics.get("batches") or 0)
        sd = n = None
        if batches >= 2:  # batch means: half = t(b-1) s / sqrt(b), so s and b give Welch its stats
            n, sd = batches, (high - low) / 2 * math.sqrt(batches) / t95(batches - 1)
        return Estimate(value, float(low), float(high), "precision", sd, n, precise)
    repeats, cv = int(metrics.get("repeats") or 1), metrics.get("cv_output_throughput")
    if metric == "output_throughput" and repeats >= 2 and cv is not None and math.isfinite(cv):
        return replace(sample_estimate(value, abs(cv * value), repeats, "repeats"), precise=precise)
    return Estimate(value, source="none", precise=precise)


def trial_estimate(metrics: Mapping[str, Any], metric: str, validation: Mapping[str, Any] | None = None) -> Estimate:
    """The trial's estimate: its re-validation when it has one, else its level's."""
    level = level_estimate(metrics, metric)
    validated = validated_estimate(validation) if validation else None
    return replace(validated, precise=level.precise) if validated else level


class Tie(NamedTuple):
    tied: bool | None  # None: at least one interval is unknown
    rule: str | None  # "welch" | "overlap" | None
    p: float | None = None  # Welch's two-sided p


def tie(a: Estimate, b: Estimate) -> Tie:
    """Whether a and b are statistically tied: Welch's test (unequal variances) cannot separate
    them at 5% when both came from samples; else, when only intervals are known, the intervals
    overlap; unknown when either interval is."""
    if not (a.known and b.known):
        return Tie(None, None)
    if a.sd is not None and a.n and a.n >= 2 and b.sd is not None and b.n and b.n >= 2:
        if a.sd == 0 and b.sd == 0:
            return Tie(a.value == b.value, "welch", 1.0 if a.value == b.value else 0.0)
        from scipy import stats

        p = float(stats.ttest_ind_from_stats(a.value, a.sd, a.n, b.value, b.sd, b.n, equal_var=False).pvalue)
        return Tie(p >= ALPHA, "welch", p)
    return Tie(a.low <= b.high and b.low <= a.high, "overlap")


def ttest_power(effect: float, n: int) -> float:
    """The power of a two-sided two-sample t test at ALPHA with n per arm, for a standardised
    effect (difference / sd; equal spreads, where Welch's df is 2n - 2)."""
    from scipy import stats

    df = 2 * n - 2
    crit = stats.t.ppf(1 - ALPHA / 2, df)
    ncp = effect * math.sqrt(n / 2)
    # scipy 1.17's nct.cdf is nan at scattered points far in the lower tail (30% of a grid of df 2-39,
    # ncp 0-60; ncp 17.8 at df 2 made ablate choose 3 repeats at 0.28% noise where 2 have power 1.0).
    # That tail (T below -crit) needs Z < -ncp, so Phi(-ncp) bounds it.
    lower = float(stats.nct.cdf(-crit, df, ncp))
    return float(stats.nct.sf(crit, df, ncp)) + (float(stats.norm.cdf(-abs(ncp))) if math.isnan(lower) else lower)


def repeats_to_detect(change: float, cv: float, power: float = POWER, cap: int = MAX_REPEATS) -> int:
    """The runs per arm for a two-sided t test at ALPHA to detect a relative `change` (0.05 = 5%)
    with `power`, at a noise CV (sd over mean); at least 2 (a t test needs them), at most `cap`."""
    if cv <= 0:
        return 2
    effect = change / cv
    for n in range(2, cap + 1):
        if ttest_power(effect, n) >= power:
            return n
    return cap
