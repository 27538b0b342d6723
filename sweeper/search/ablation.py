"""Ablation (one lever at a time from a baseline, the case study's ledger) and finalist validation:
pure builders of the runs and pure summaries with 95% confidence intervals."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from sweeper.spec.space import Space
from sweeper.search.configs import config_key, is_active, parameter_values

# Two-sided 95% Student t quantiles by degrees of freedom (1..30); 1.96 beyond.
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042]


def t95(df: float) -> float:
    if df < 1:
        return math.inf
    return _T95[min(int(df), 30) - 1] if df <= 30 else 1.96


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


def summarize_ablation(runs: Sequence[Measured], maximize: bool = True) -> list[dict]:
    """One row per lever: delta against the baseline with its 95% CI and a verdict."""
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
        better = delta > 0 if maximize else delta < 0
        verdict = "within noise" if abs(delta) <= half else ("helps" if better else "hurts")
        rows.append({"lever": label, "mean": statistics.fmean(ok), "delta": delta, "ci95": half,
                     "delta_pct": 100 * delta / statistics.fmean(baseline), "verdict": verdict})
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
    from sweeper.search.pareto import front_keys

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
