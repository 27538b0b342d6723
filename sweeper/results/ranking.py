"""Ranking at any concurrency level: the objective's metric read at level C. Only feasible trials
whose level C is valid rank; duplicates, failures and invalid levels never do. Each ranked value
carries its 95% CI and whether it is statistically tied with #1 (sweeper/study/confidence.py)."""

from __future__ import annotations

import math

import optuna
import pandas as pd

from sweeper.loadgen.capacity import capacity_found
from sweeper.errors import UserError
from sweeper.outcomes import CAPACITY_METRIC
from sweeper.levels import Level, as_level_of, format_number, level_key
from sweeper.results.leaderboard import leaderboard_frame, study_levels
from sweeper.study.trials import is_pareto_study
from sweeper.study.confidence import Estimate, tie, trial_estimate
from sweeper.study.stored import ObjectiveSpec, objective_spec

# What ranked_frame adds to the leaderboard besides rank, rank_level and rank_value
CONFIDENCE_COLUMNS = ("ci_low", "ci_high", "ci_source", "validated", "precision_reached", "tied_with_best",
                      "tie_rule")


def rank_value(trial_levels: dict, feasible: bool, spec: ObjectiveSpec, capacity: dict | None = None) -> float:
    """The metric a trial ranks by at the spec's level (max_load_within_slo: the capacity its
    search found, `capacity` attr); NaN when it cannot rank there."""
    if spec.metric == CAPACITY_METRIC:
        found = capacity_found(capacity)
        return float(found) if feasible and found is not None else math.nan
    metrics = trial_levels.get(level_key(spec.level)) or {}
    value = metrics.get(spec.metric)
    if not feasible or metrics.get("valid") is not True or value is None:
        return math.nan
    value = float(value)
    return value if math.isfinite(value) else math.nan


def resolve_level(study: optuna.Study, value: int | float | str | None) -> Level | None:
    """`--level` (a number, or a label such as r2.5) as one of the study's levels; None stays
    None (the objective's own level)."""
    if value is None:
        return None
    levels = study_levels(study)
    level = as_level_of(levels, value)
    if level is None:
        raise UserError(f"--level {value}: study {study.study_name!r} measured levels "
                        f"{', '.join(format_number(l) for l in levels) or 'none'}")
    return level


def ranked_frame(study: optuna.Study, level: int | float | str | None = None, feasible_only: bool = False) -> pd.DataFrame:
    """The leaderboard with `rank` (1 = best; empty when a trial does not rank), `rank_level` and
    `rank_value`, ranked trials first, then the rest by trial number. Validated configs (re-run on
    fresh servers) rank first, by their re-runs' mean, the campaign's declared winner at #1; the
    configs measured once in the sweep rank after them, by that value (`validated` false): a single
    run never ranks above validated means. In the Pareto mode only the front ranks, by its first
    objective (throughput)."""
    level = resolve_level(study, level)
    if is_pareto_study(study):
        return front_ranked_frame(study, level, feasible_only)
    spec = objective_spec(study, level)
    frame = leaderboard_frame(study)
    if frame.empty:
        return _empty_ranked(frame)
    estimates = _estimates(study, frame, spec)
    frame = frame.assign(rank_level=spec.level, rank_value=[e.value if e else math.nan for e in estimates],
                         _estimate=estimates)
    key = -frame["rank_value"] if spec.maximize else frame["rank_value"]
    winner = verdict_winner(study, spec)
    group = [2 if e is None else 0 if e.source == "validation" else 1 for e in estimates]
    frame = (frame.assign(_group=group, _first=[0 if t == winner else 1 for t in frame["trial"]], _key=key)
             .sort_values(["_group", "_first", "_key", "trial"], na_position="last")
             .drop(columns=["_group", "_first", "_key"]).reset_index(drop=True))
    ranked = frame["rank_value"].notna()
    frame["rank"] = pd.array([i + 1 if r else None for i, r in enumerate(ranked)], dtype="Int64")
    frame = _with_verdict_ties(_with_confidence(frame, ties=True), study, spec)
    if feasible_only:
        frame = frame[ranked].reset_index(drop=True)
    return frame


def campaign_verdict(study: optuna.Study) -> dict | None:
    """The verdict a campaign's validation stored with its rows (winner, tied_with, separated, p,
    reason: sweeper/workflows/validation.py plan_validation), or None (no campaign, or a later `validate`
    replaced its rows)."""
    return (study.user_attrs.get("validation") or {}).get("verdict") or None


def verdict_winner(study: optuna.Study, spec: ObjectiveSpec) -> int | None:
    """The trial the campaign's verdict declared the winner, where its re-runs rank here."""
    verdict = campaign_verdict(study)
    if not verdict or not verdict.get("winner") or not validation_rows(study, spec):
        return None
    return label_trial(verdict["winner"])


def label_trial(label: str) -> int:
    """The sweep trial a validation label ("trial 5") names."""
    return int(label.split()[-1])


def _with_verdict_ties(frame: pd.DataFrame, study: optuna.Study, spec: ObjectiveSpec) -> pd.DataFrame:
    """Where a campaign's validation declared its verdict, its tie set is the top's: a finalist it
    could not separate from the winner (one re-run, or Welch p >= 0.05 when --max-repeats ran out)
    is tied, every other validated config is not, so the summary, `best`, the leaderboard, the
    report and the launch script say the same."""
    winner = verdict_winner(study, spec)
    if winner is None or frame.empty or frame["trial"].iloc[0] != winner:
        return frame
    tied = frame["trial"].isin({label_trial(label) for label in campaign_verdict(study).get("tied_with") or []})
    others = frame["validated"].astype(bool) & (frame.index > 0)
    frame["tied_with_best"] = frame["tied_with_best"].astype(object)
    frame.loc[others, "tied_with_best"] = False
    frame.loc[tied, "tied_with_best"] = True
    frame.loc[tied & (frame["tie_rule"] == ""), "tie_rule"] = "campaign"
    return frame


def _empty_ranked(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(rank=pd.Series(dtype="Int64"), rank_level=pd.Series(dtype="int64"),
                        rank_value=pd.Series(dtype="float64"),
                        **{name: pd.Series(dtype="object") for name in CONFIDENCE_COLUMNS})


def validation_rows(study: optuna.Study, spec: ObjectiveSpec) -> dict[int, dict]:
    """Trial number -> its row of `sweeper validate`'s re-runs, when they measured what ranks here
    (the objective's first metric at its own level)."""
    first = objective_spec(study)
    if (spec.level, spec.metric) != (first.level, first.metric):
        return {}
    validation = study.user_attrs.get("validation") or {}
    if validation.get("mode") == "pareto":  # the front is not re-ranked by its re-runs
        return {}
    rows = validation.get("rows") or []
    return {int(row["config"].split()[-1]): row for row in rows}


def _estimates(study: optuna.Study, frame: pd.DataFrame, spec: ObjectiveSpec) -> list[Estimate | None]:
    """Each row's ranked value with its CI (a validated finalist ranks by its re-runs' mean); None
    where the trial does not rank at this level."""
    attrs_by_trial = {t.number: t.user_attrs for t in study.get_trials(deepcopy=False)}
    validated = validation_rows(study, spec)
    estimates = []
    for number, feasible in zip(frame["trial"], frame["feasible"]):
        attrs = attrs_by_trial.get(number, {})
        levels = attrs.get("levels", {})
        value = rank_value(levels, bool(feasible), spec, attrs.get("capacity"))
        if math.isnan(value):
            estimates.append(None)
        elif spec.metric == CAPACITY_METRIC:  # one search per trial: no interval
            estimates.append(Estimate(value))
        else:
            estimates.append(trial_estimate(levels[level_key(spec.level)], spec.metric, validated.get(number)))
    return estimates


def _with_confidence(frame: pd.DataFrame, ties: bool) -> pd.DataFrame:
    """The CI columns from the `_estimate` column (dropped), and with `ties` each ranked row's tie
    with rank 1 (rank 1 itself is tied with itself: the rows marked true are the top's tie set).
    When rank 1 is validated, a config measured only in the sweep has no tie with it (unknown):
    its interval, if any, is of one launch, not of launch-to-launch noise."""
    estimates = list(frame["_estimate"])
    ranked_first = len(frame) > 0 and not pd.isna(frame["rank"].iloc[0])  # sorted: rank 1 is row 0
    first = estimates[0] if ties and ranked_first else None
    comparable = [e is not None and (first is None or first.source != "validation" or e.source == "validation")
                  for e in estimates]
    verdicts = [tie(first, e) if first is not None and ok else None for e, ok in zip(estimates, comparable)]
    return frame.drop(columns="_estimate").assign(
        ci_low=[e.low if e and e.known else math.nan for e in estimates],
        ci_high=[e.high if e and e.known else math.nan for e in estimates],
        ci_source=[e.source if e else "" for e in estimates],
        validated=[e.source == "validation" if e else None for e in estimates],
        precision_reached=[e.precise if e and e.precise is not None else None for e in estimates],
        tied_with_best=[v.tied if v and v.tied is not None else None for v in verdicts],
        tie_rule=[v.rule if v and v.rule else "" for v in verdicts],
    )


def front_ranked_frame(study: optuna.Study, level: int | None = None, feasible_only: bool = False) -> pd.DataFrame:
    """The Pareto mode's leaderboard: the front first, ranked 1..n by the first objective, each
    with both values (`objective`, `objective_2`); then dominated feasible trials, then the rest."""
    if level is not None:
        raise UserError(f"--level: study {study.study_name!r} has two objectives, each at its own level; "
                        "its Pareto front is not ranked at another level")
    spec = objective_spec(study)
    frame = leaderboard_frame(study)
    if frame.empty:
        return _empty_ranked(frame)
    front = frame["on_front"].astype(bool)
    # the front's members trade throughput for latency: CIs of the first objective, no ties
    estimates = [e if f else None for e, f in zip(_estimates(study, frame, spec), front)]
    frame = frame.assign(rank_level=spec.level, rank_value=frame["objective"].where(front), _estimate=estimates)
    frame["rank"] = pd.array([i + 1 if f else None for i, f in enumerate(front)], dtype="Int64")
    frame = _with_confidence(frame, ties=False)
    if feasible_only:
        frame = frame[front].reset_index(drop=True)
    return frame


def plain_cell(value):
    """A frame cell as plain (JSON) data: NaN and NA become None, numpy scalars Python ones."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def best_ranked_trial(study: optuna.Study, level: int | None = None) -> optuna.trial.FrozenTrial | None:
    """The trial ranked first at `level` (default: the objective's level), or None."""
    frame = ranked_frame(study, level, feasible_only=True)
    if frame.empty:
        return None
    return trial_by_number(study, int(frame["trial"].iloc[0]))


def trial_by_number(study: optuna.Study, number: int) -> optuna.trial.FrozenTrial:
    """The study's trial with this number."""
    return next(t for t in study.get_trials(deepcopy=False) if t.number == number)
