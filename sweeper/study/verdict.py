"""How a run of trials ended, for its last line and its exit code: how much was measured, what
ranks, and why the rest failed (stage/kind, most common first, with one message of each)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import optuna
from optuna.trial import TrialState

from sweeper.study.trials import best_trial, feasible_trials, is_evaluation


# A copy, a config the space's own rules exclude (free), or a measured one (an SLO it broke is a
# result, not a fault): none of these says the sweep went wrong.
NOT_FAULTS = ("rule", "constraint", "slo", "abandoned")


@dataclass(frozen=True)
class SweepVerdict:
    evaluations: int
    budget: int
    ranked: int  # trials that can win
    failures: Counter = field(default_factory=Counter)  # "stage/kind" -> trials
    examples: dict = field(default_factory=dict)  # "stage/kind" -> one message
    best: tuple[int, float] | None = None  # (trial, first objective value)

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    @property
    def measured_nothing(self) -> bool:
        return self.evaluations == 0

    @property
    def one_cause(self) -> str | None:
        """The single cause every finished trial failed for (None: something ranked, or several causes)."""
        return next(iter(self.failures)) if self.ranked == 0 and len(self.failures) == 1 else None

    @property
    def ok(self) -> bool:
        """What a script may trust: something was measured and not everything failed one way."""
        return not self.measured_nothing and self.one_cause is None


def build_sweep_verdict(study: optuna.Study, budget: int) -> SweepVerdict:
    failures: Counter = Counter()
    examples: dict[str, str] = {}
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        attrs = trial.user_attrs
        failure = attrs.get("failure")
        if "duplicate_of" in attrs or failure is None or failure.get("kind") in NOT_FAULTS:
            continue
        cause = f"{failure.get('stage')}/{failure.get('kind')}"
        failures[cause] += 1
        examples.setdefault(cause, " ".join(str(failure.get("message", "")).split())[:160])
    best = best_trial(study)
    evaluations = sum(1 for t in study.get_trials(deepcopy=False) if is_evaluation(t))
    return SweepVerdict(evaluations, budget, len(feasible_trials(study)), Counter(dict(failures.most_common())), examples,
                        (best.number, best.values[0]) if best is not None else None)


def format_verdict(name: str, verdict: SweepVerdict) -> str:
    """One line: `sweep NAME: ...` naming what was measured, the best, and the failures by cause."""
    spent = f"{verdict.evaluations} of {verdict.budget} evaluations"
    causes = "; ".join(f"{cause} x{count}" + (f" ({verdict.examples[cause]})" if i == 0 else "")
                       for i, (cause, count) in enumerate(verdict.failures.items()))
    if verdict.measured_nothing:
        why = f": {verdict.failed} trials failed before a launch: {causes}" if verdict.failures else ""
        return f"sweep {name}: nothing measured ({spent}){why}"
    if (cause := verdict.one_cause) is not None:
        return f"sweep {name}: every trial failed ({spent}), all {cause}: {verdict.examples[cause]}"
    best = f", best {verdict.best[1]:.2f} (trial {verdict.best[0]})" if verdict.best else ", none feasible"
    failed = f"; {verdict.failed} failed: {causes}" if verdict.failures else ""
    return f"sweep {name}: {spent}{best}{failed}"
