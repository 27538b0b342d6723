"""Ablation (one lever at a time from a baseline, the case study's ledger) and finalist validation:
pure builders of the runs and pure summaries with 95% confidence intervals.

Statistics from scipy.stats: Student t quantiles for every degree of freedom (a hand table once
rounded df above 30 to 1.96, 2-4% too narrow up to df 120), Welch's test per lever, and since an
ablation tests many levers at once, the Benjamini-Hochberg correction across them (at 27 levers and
5% each, one would read "helps" or "hurts" by chance alone)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Sequence

import optuna

from sweeper.errors import UserError
from sweeper.spec.space import Space
from sweeper.study.trials import ranked_trials
from sweeper.search.configs import config_key, is_active, parameter_values
from sweeper.study.confidence import ALPHA, t95  # ALPHA: also the false discovery rate across levers
from sweeper.search.pareto import front_keys
from sweeper.loadgen.metrics import coefficient_of_variation
from sweeper.study.confidence import MAX_REPEATS, POWER, repeats_to_detect, ttest_power


def sampled_config(space: Space, values: dict[str, Any]) -> dict[str, Any]:
    """Sampled values for every active parameter, in file order: a changed lever can switch
    conditional parameters on (they take the baseline's value or their first value) or off."""
    config: dict[str, Any] = {}
    for name, param in space.parameters.items():
        if is_active(space, name, config):
            config[name] = values[name] if name in values else parameter_values(param)[0]
    return config


def single_lever_changes(space: Space, baseline: dict[str, Any]) -> list[tuple[str, Any, dict]]:
    """(lever, value, sampled config) for every other value of every active parameter."""
    base = sampled_config(space, baseline)
    changes, seen = [], {config_key(base)}
    for name in base:
        try:
            values = parameter_values(space.parameters[name])
        except ValueError:  # a continuous float: ablate only discrete levers
            continue
        for value in values:
            config = sampled_config(space, {**base, name: value})
            if config_key(config) not in seen:
                seen.add(config_key(config))
                changes.append((name, value, config))
    return changes


def ablation_runs(space: Space, baseline: dict[str, Any], repeats: int) -> list[tuple[str, dict]]:
    """(label, config) of the baseline and every single-lever change from it, `repeats` rounds in
    interleaved order (a drift of the machine hits every config alike)."""
    round_ = [("baseline", sampled_config(space, baseline))] + [
        (f"{lever}={value}", config) for lever, value, config in single_lever_changes(space, baseline)]
    return [run for _ in range(repeats) for run in round_]


def finalist_runs(study: optuna.Study, top: int, repeats: int) -> tuple[list[str], list[tuple[str, dict]]]:
    """The labels of a study's top K ranked trials ("trial N") and their runs, `repeats` rounds
    in interleaved order."""
    labels = {f"trial {t.number}": dict(t.params) for t in ranked_trials(study)[:top]}
    return list(labels), [run for _ in range(repeats) for run in labels.items()]


@dataclass(frozen=True)
class Measured:
    label: str  # "baseline" or "lever=value" or a config label
    value: float | None  # the objective, None when the run failed


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.inf
    return mean, t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def delta_ci(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Mean of b minus mean of a, and the half-width of its 95% interval (Welch)."""
    if len(a) < 2 or len(b) < 2:
        return statistics.fmean(b) - statistics.fmean(a), math.inf
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return statistics.fmean(b) - statistics.fmean(a), 0.0
    df = (va + vb) ** 2 / ((va ** 2) / (len(a) - 1) + (vb ** 2) / (len(b) - 1))
    return statistics.fmean(b) - statistics.fmean(a), t95(df) * se


def welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p of Welch's t test that a and b share a mean (1.0 when it cannot be computed)."""
    from scipy import stats

    if len(a) < 2 or len(b) < 2:
        return 1.0
    if statistics.pvariance(a) == 0 and statistics.pvariance(b) == 0:
        return 1.0 if statistics.fmean(a) == statistics.fmean(b) else 0.0
    return float(stats.ttest_ind(b, a, equal_var=False).pvalue)


def summarize_ablation(runs: Sequence[Measured], maximize: bool = True) -> list[dict]:
    """One row per lever: delta against the baseline with its 95% CI, Welch's p, p adjusted across
    the levers (Benjamini-Hochberg), and a verdict: helps / hurts only when the adjusted p is below
    ALPHA, else within noise."""
    by_label: dict[str, list[float | None]] = {}
    for run in runs:
        by_label.setdefault(run.label, []).append(run.value)
    baseline = [v for v in by_label.pop("baseline", []) if v is not None]
    rows = []
    for label, values in by_label.items():
        ok = [v for v in values if v is not None]
        if len(ok) < len(values) or not baseline:
            rows.append({"lever": label, "mean": None, "delta": None, "ci95": None, "delta_pct": None,
                         "verdict": "breaks" if len(ok) < len(values) else "no baseline"})
            continue
        delta, half = delta_ci(baseline, ok)
        rows.append({"lever": label, "mean": statistics.fmean(ok), "delta": delta, "ci95": half,
                     "delta_pct": 100 * delta / statistics.fmean(baseline), "p": welch_p(baseline, ok)})
    tested = [r for r in rows if "p" in r]
    if tested:
        from scipy import stats

        for row, adjusted in zip(tested, stats.false_discovery_control([r["p"] for r in tested], method="bh")):
            better = row["delta"] > 0 if maximize else row["delta"] < 0
            row["p_adjusted"] = float(adjusted)
            row["verdict"] = "within noise" if adjusted >= ALPHA else ("helps" if better else "hurts")
    order = {"helps": 0, "within noise": 1, "hurts": 2, "breaks": 3, "no baseline": 4}
    return sorted(rows, key=lambda r: (order[r["verdict"]], -(r["delta"] or 0) if maximize else (r["delta"] or 0)))


def summarize_finalists(runs: Sequence[Measured], maximize: bool = True) -> list[dict]:
    """One row per finalist: mean and 95% CI over its repeats, best first."""
    by_label: dict[str, list[float | None]] = {}
    for run in runs:
        by_label.setdefault(run.label, []).append(run.value)
    rows = []
    for label, values in by_label.items():
        ok = [v for v in values if v is not None]
        mean, half = mean_ci(ok) if ok else (None, None)
        rows.append({"config": label, "runs": len(values), "failed": len(values) - len(ok),
                     "mean": mean, "ci95": half})
    sign = 1 if maximize else -1
    return sorted(rows, key=lambda r: (r["mean"] is None, -sign * (r["mean"] or 0)))


def summarize_pareto_finalists(runs: Sequence[tuple[str, list[float] | None]]) -> list[dict]:
    """The Pareto mode: one row per finalist with the mean and 95% CI of both objectives
    (throughput up, latency down) over its repeats, and whether its means are still on the front
    of the finalists' means. Front first, then by throughput."""
    by_label: dict[str, list[list[float] | None]] = {}
    for label, values in runs:
        by_label.setdefault(label, []).append(values)
    rows = []
    for label, values in by_label.items():
        ok = [v for v in values if v is not None]
        (mean, half), (mean_2, half_2) = ((mean_ci([v[i] for v in ok]) for i in (0, 1)) if ok
                                          else ((None, None), (None, None)))
        rows.append({"config": label, "runs": len(values), "failed": len(values) - len(ok),
                     "mean": mean, "ci95": half, "mean_2": mean_2, "ci95_2": half_2})
    measured = {r["config"]: (r["mean"], r["mean_2"]) for r in rows if r["mean"] is not None}
    front = set(front_keys(measured, (True, False)))
    for row in rows:
        row["on_front"] = row["config"] in front
    return sorted(rows, key=lambda r: (not r["on_front"], r["mean"] is None, -(r["mean"] or 0)))


DETECT = 0.05  # ablate's default repeats detect a change this large (relative)


def repeats_for_noise(pilot: Sequence[float | None]) -> dict:
    """The runs per config that detect a DETECT change at the noise (CV) of the baseline's first
    runs (two-sided t test at ALPHA, power POWER), with the sentence that says so. Raises when
    fewer than two of them succeeded."""
    ok = [v for v in pilot if v is not None]
    if len(ok) < 2:
        raise UserError(f"--baseline: {len(pilot) - len(ok)} of {len(pilot)} first runs of the baseline failed, "
                        "so its noise (and the repeats an ablation needs) is unknown; see the study's trials, "
                        "or give --repeats")
    cv = abs(coefficient_of_variation(ok))
    n = repeats_to_detect(DETECT, cv)
    capped = cv > 0 and ttest_power(DETECT / cv, n) < POWER
    note = (f"repeats: {n}, chosen to detect a {DETECT:.0%} change at the measured {cv:.1%} noise "
            f"(CV of {len(ok)} baseline runs; two-sided t test at alpha {ALPHA}, power {POWER})")
    if capped:
        note += f"; capped at {MAX_REPEATS}: a {DETECT:.0%} change needs more at this noise (give --repeats)"
    return {"repeats": n, "cv": cv, "pilot_runs": len(ok), "detect": DETECT, "power": POWER, "alpha": ALPHA,
            "capped": capped, "note": note}
