"""The study's answer: the config that wins, its value with the 95% CI, how many fresh launches
back it, the configs tied with it, and the study's noise floor. The one source that `best` (and
`best --json`), `show`, the campaign summary, the report and serve-winner.sh read, so they cannot
disagree; it is the top of the ranked frame (ranking.py), which ranks validated configs first, the
campaign's declared winner at #1 with the verdict's tie set (the verdict stored in the study)."""

from __future__ import annotations

from dataclasses import dataclass

import optuna
import pandas as pd

from sweeper.results.ranking import (campaign_verdict, plain_cell, ranked_frame, trial_by_number, validation_rows,
                                     verdict_winner)
from sweeper.study.stored import objective_spec
from sweeper.study.trials import is_pareto_study

NOISE_FLOOR_ATTR = "noise_floor"  # {between_cv, within_cv, launches, repeats, level}, written by the campaign


@dataclass(frozen=True)
class Answer:
    trial: int
    params: dict
    metric: str  # the objective's name (metric@level)
    value: float  # the validated mean, else the one sweep measurement
    ci_low: float | None  # the value's 95% CI (None: unknown)
    ci_high: float | None
    ci_source: str  # validation | precision | repeats | none (sweeper/study/confidence.py)
    validated: bool  # re-run on fresh servers (`validate`, a campaign's validation)
    launches: int  # the fresh launches the value is the mean of (1: the sweep's one measurement)
    failed_launches: int  # re-runs of it that failed
    # None: no statement is possible (the value's interval is unknown and no campaign judged it);
    # []: nothing is tied with it; else the trials that cannot be told apart from it
    tied_with: list[int] | None
    tie_rule: str | None  # welch | overlap | campaign (how the tie was judged)
    why: str | None  # the campaign's reason for its verdict (a tie, or separated)
    noise_floor: dict | None  # the study's `noise_floor` attr, where recorded

    def as_record(self) -> dict:
        """`best --json`: plain data."""
        return {"trial": self.trial, "params": self.params, "value": self.value, "ci_low": self.ci_low,
                "ci_high": self.ci_high, "ci_source": self.ci_source, "validated": self.validated,
                "launches": self.launches, "failed_launches": self.failed_launches, "tied_with": self.tied_with,
                "tie_rule": self.tie_rule, "why": self.why, "noise_floor": self.noise_floor}


def build_answer(study: optuna.Study) -> Answer | None:
    """Rank 1 of the study at its objective's level, with its tie set; None when nothing ranks,
    and in the Pareto mode (no single winner: its front is the answer)."""
    if is_pareto_study(study):
        return None
    spec = objective_spec(study)
    frame = ranked_frame(study, feasible_only=True)
    if frame.empty:
        return None
    top = frame.iloc[0]
    number = int(top["trial"])
    validated = bool(top["validated"])
    row = validation_rows(study, spec).get(number) if validated else None
    judged = verdict_winner(study, spec) == number  # the campaign's verdict names this winner
    tied = [(int(other["trial"]), other["tie_rule"]) for _, other in frame.iloc[1:].iterrows()
            if tied_cell(other["tied_with_best"]) is True]
    known = plain_cell(top["ci_low"]) is not None
    failed = int(row["failed"]) if row else 0
    return Answer(
        trial=number, params=dict(trial_by_number(study, number).params), metric=spec.name,
        value=float(top["rank_value"]), ci_low=plain_cell(top["ci_low"]), ci_high=plain_cell(top["ci_high"]),
        ci_source=top["ci_source"] or "none", validated=validated,
        launches=int(row["runs"]) - failed if row else 1, failed_launches=failed,
        tied_with=[trial for trial, _ in tied] if known or judged else None,
        tie_rule=None if not tied else "campaign" if judged else (tied[0][1] or None),
        why=(campaign_verdict(study) or {}).get("reason") if judged else None,
        noise_floor=study.user_attrs.get(NOISE_FLOOR_ATTR))


def _trials(numbers: list[int]) -> str:
    return f"trial{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers))}"


def format_value(answer: Answer) -> str:
    """'output_throughput@c16 = 23,100.00 (validated mean of 4 fresh launches, 95% CI 22,900.00-23,300.00)'."""
    ci = ("95% CI unknown" if answer.ci_low is None or answer.ci_high is None
          else f"95% CI {answer.ci_low:,.2f}-{answer.ci_high:,.2f}")
    if answer.validated:
        failed = f", {answer.failed_launches} more failed" if answer.failed_launches else ""
        how = f"validated mean of {answer.launches} fresh launch{'es' if answer.launches != 1 else ''}{failed}"
    else:
        how = "one sweep launch, not re-validated" + ("" if answer.ci_source == "none" else f"; {answer.ci_source}")
    return f"{answer.metric} = {answer.value:,.2f} ({how}, {ci})"


def format_tie(answer: Answer) -> str:
    """The tie in words: which trials, and who could not separate them."""
    if answer.tied_with is None:
        return "ties unknown: one measurement has no interval (re-validate the finalists to tell)"
    if not answer.tied_with:
        return "no tie: no other validated config is tied with it" if answer.validated else \
            f"no tie at the level's own interval ({answer.ci_source}; not re-validated)"
    if answer.why is not None:
        return f"tied with {_trials(answer.tied_with)}: the campaign could not separate them ({answer.why})"
    if answer.validated:
        return f"tied with {_trials(answer.tied_with)}: their re-runs cannot be told apart ({answer.tie_rule})"
    return f"tied with {_trials(answer.tied_with)} ({answer.tie_rule}, within one launch; not re-validated)"


def format_noise_floor(record: dict | None) -> str | None:
    """'noise floor: between-launch CV 1.8%, within-launch CV 0.9% (5 launches x 3 repeats, c16)';
    None when the study recorded none."""
    if not record:
        return None

    def cv(value):
        return "unknown" if value is None else f"{100 * value:.1f}%"

    level = f", {record['level']}" if record.get("level") else ""
    return (f"noise floor: between-launch CV {cv(record.get('between_cv'))}, within-launch CV "
            f"{cv(record.get('within_cv'))} ({record.get('launches', '?')} launches x "
            f"{record.get('repeats', '?')} repeats{level})")


def format_answer_lines(answer: Answer) -> list[str]:
    """The answer in plain lines: the winner and its value, the tie, the noise floor (when recorded)."""
    noise = format_noise_floor(answer.noise_floor)
    return [f"trial {answer.trial}: {format_value(answer)}", format_tie(answer), *([noise] if noise else [])]


def tied_cell(value) -> bool | None:
    """A `tied_with_best` cell as True, False or None."""
    return None if value is None or pd.isna(value) else bool(value)
