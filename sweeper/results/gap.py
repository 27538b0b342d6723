"""Gap to target: how far the best config is from what the deployment must reach, in decode step
time. In a decode-bound regime every running request gets one token per step, so the step time at
concurrency C is the median inter-token latency, and C requests at T tok/s in all need a step of
C / T seconds. Pure: data in, numbers and lines out."""

from __future__ import annotations

import math
from dataclasses import dataclass

import optuna

from sweeper.levels import is_rate, level_key, short_level
from sweeper.spec.space import Target
from sweeper.results.leaderboard import study_levels
from sweeper.results.ranking import best_ranked_trial
from sweeper.study.stored import kernel_groups, objective_spec, stored_space

HIGHER_IS_BETTER = {"output_throughput", "total_throughput", "request_throughput"}


@dataclass(frozen=True)
class LevelStep:
    level: int
    step_ms: float  # median ITL
    output_tok_s: float


@dataclass(frozen=True)
class KernelShare:
    group: str
    fraction: float
    step_ms: float  # of the step at the target's level


@dataclass(frozen=True)
class GapToTarget:
    trial: int
    metric: str
    level: int
    target_value: float
    measured_value: float | None  # the metric at the target's level
    shortfall: float | None  # how many times better the metric must get (>1: missing)
    steps: tuple[LevelStep, ...]
    step_ms: float | None  # measured step at the target's level
    needed_step_ms: float | None  # the step the target needs (throughput and ITL targets)
    kernels: tuple[KernelShare, ...] = ()

    @property
    def step_speedup(self) -> float | None:
        """How many times faster a decode step must get."""
        if self.step_ms is None or not self.needed_step_ms:
            return None
        return self.step_ms / self.needed_step_ms


def needed_step_ms(metric: str, value: float, level: int) -> float | None:
    """The decode step that reaches the target: C / (tok/s) for output throughput, the ITL itself
    for an ITL target; None for metrics a step time does not determine."""
    if metric == "output_throughput":
        return 1000.0 * level / value
    if metric in ("median_itl_ms", "p99_itl_ms"):
        return value
    return None


def _finite(value) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def build_level_steps(trial_levels: dict, levels: list[int]) -> tuple[LevelStep, ...]:
    rows = []
    for level in levels:
        metrics = trial_levels.get(level_key(level)) or {}
        step = _finite(metrics.get("median_itl_ms"))
        if metrics.get("valid") is True and step is not None:
            rows.append(LevelStep(level, step, _finite(metrics.get("output_throughput")) or math.nan))
    return tuple(rows)


def build_kernel_shares(profile: dict | None, step_ms: float | None) -> tuple[KernelShare, ...]:
    """A kernel profile {group: fraction of the step}, largest first."""
    if not profile:
        return ()
    shares = [(str(g), float(f)) for g, f in profile.items() if _finite(f) is not None]
    shares.sort(key=lambda item: -item[1])
    return tuple(KernelShare(g, f, (step_ms or math.nan) * f) for g, f in shares)


def build_gap_to_target(target: Target, default_level: int, trial_number: int, trial_levels: dict,
                        levels: list[int], kernel_profile: dict | None = None) -> GapToTarget:
    level = default_level if target.level is None else type(default_level)(target.level)  # a Rate stays one
    metrics = trial_levels.get(level_key(level)) or {}
    measured = _finite(metrics.get(target.metric)) if metrics.get("valid") is True else None
    if measured is None or measured <= 0:
        shortfall = None
    elif target.metric in HIGHER_IS_BETTER:
        shortfall = target.value / measured
    else:
        shortfall = measured / target.value
    steps = build_level_steps(trial_levels, levels)
    step = next((s.step_ms for s in steps if s.level == level), None)
    return GapToTarget(trial=trial_number, metric=target.metric, level=level, target_value=target.value,
                       measured_value=measured, shortfall=shortfall, steps=steps, step_ms=step,
                       # the decode-step bound holds C requests in flight: none for an open loop
                       needed_step_ms=None if is_rate(level) else needed_step_ms(target.metric, target.value, level),
                       kernels=build_kernel_shares(kernel_profile, step))


def format_gap_lines(gap: GapToTarget) -> list[str]:
    """The gap in a few plain lines (for `sweeper show` and the report)."""
    measured = "-" if gap.measured_value is None else f"{gap.measured_value:.2f}"
    lines = [f"target: {gap.metric} = {gap.target_value:g} at {short_level(gap.level)}; best (trial {gap.trial}) "
             f"measured {measured}" + (f", {gap.shortfall:.1f}x short" if gap.shortfall else "")]
    if gap.steps:
        lines.append("decode step (median ITL): " + ", ".join(f"{short_level(s.level)} {s.step_ms:.1f} ms"
                                                             for s in gap.steps))
    if gap.needed_step_ms is not None:
        have = "-" if gap.step_ms is None else f"{gap.step_ms:.1f} ms"
        speedup = f": {gap.step_speedup:.1f}x faster steps missing" if gap.step_speedup else ""
        lines.append(f"step needed at {short_level(gap.level)}: {gap.needed_step_ms:.1f} ms (have {have}){speedup}")
    if gap.kernels:
        lines.append("step time by kernel group: " + ", ".join(
            f"{k.group} {100 * k.fraction:.0f}% ({k.step_ms:.0f} ms)" for k in gap.kernels))
    return lines


def build_study_gap(study: optuna.Study) -> GapToTarget | None:
    """The gap of the study's best config (the validated winner once re-validation ran) to its
    space's target, its step split by the kernel groups of that config's stored profile; None
    without a target or a best."""
    space = stored_space(study)
    best = best_ranked_trial(study)  # rank 1: the validated winner once re-validation ran
    if space is None or space.perf_target is None or best is None:
        return None
    return build_gap_to_target(space.perf_target, objective_spec(study).level, best.number,
                               best.user_attrs.get("levels", {}), study_levels(study),
                               kernel_groups(study, best.number))
