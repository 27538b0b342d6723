"""Warm start: what earlier studies of the same engine and model teach a new one. Their best
feasible configs that are valid in the new space run first (as seeds), the configs they proved
broken are skipped with the reason they recorded, and their correctness reference carries over
when the check is the same. Building is pure (studies in, WarmStart out); `apply_warm_start` writes
it into the new study (attr `warm_start`, queued seeds, the reference)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import optuna

from sweeper.errors import UserError
from sweeper.outcomes import HOST_BOUND_KINDS
from sweeper.redact import redact_url
from sweeper.spec.space import Space
from sweeper.search.configs import config_key, config_problem, with_derived
from sweeper.study.reference import adopt_reference, reference_samples
from sweeper.study.stored import output_rejected, stored_space
from sweeper.study.trials import ranked_trials
from sweeper.study.store import enqueue_space_seeds, load_study
from sweeper.study.runs import enqueue_runs

WARM_TOP = 3  # feasible configs taken from each earlier study


def parse_warm_source(text: str) -> tuple[str, str | None]:
    """'NAME' (a study under --results) or 'URL#NAME' (any Optuna storage URL) -> (name, url)."""
    if "://" not in text:
        return text, None
    url, sep, name = text.rpartition("#")
    if not sep or not name or "://" not in url:
        raise UserError(f"--warm-start {redact_url(text)!r}: a storage URL needs the study name after '#', "
                        "e.g. sqlite:///results/old/study.db#old")
    return name, url


def load_warm_sources(texts: list[str], results: Path) -> list[optuna.Study]:
    return [load_study(name, results, url) for name, url in map(parse_warm_source, texts)]


@dataclass
class WarmStart:
    seeds: list[tuple[str, dict]] = field(default_factory=list)  # (label, params), best first
    broken: dict[str, str] = field(default_factory=dict)  # config key in the new space -> why
    reference: tuple[list, str] | None = None  # (samples, where from)
    notes: list[str] = field(default_factory=list)

    def to_record(self, sources: list[str]) -> dict:
        return {"sources": sources, "seeds": [{"label": l, "params": p} for l, p in self.seeds],
                "broken": self.broken, "reference": self.reference[1] if self.reference else None,
                "notes": self.notes}


def _broken_reason(trial: optuna.trial.FrozenTrial, rejected: dict[str, str]) -> str | None:
    """What a finished trial proved wrong with its config (None: nothing, or the infrastructure's fault)."""
    failure = trial.user_attrs.get("failure")
    if failure and failure.get("kind") in HOST_BOUND_KINDS:
        return None  # too big for that study's host: the new study's preflight judges its own
    if failure and (trial.constraints or {}).get("config_fault", 0) > 0:
        return f"{failure['stage']}/{failure['kind']}: {failure.get('message', '')}".rstrip(": ")
    if str(trial.number) in rejected:
        return f"check_output/bad_output: {rejected[str(trial.number)]}"
    return None


def build_warm_start(space: Space, sources: list[optuna.Study], top: int = WARM_TOP) -> WarmStart:
    warm = WarmStart()
    seen: set[str] = set()
    for source in sources:
        name, earlier = source.study_name, stored_space(source)
        if earlier is None:
            warm.notes.append(f"{name}: skipped, its stored space no longer parses")
            continue
        if (earlier.engine, earlier.model) != (space.engine, space.model):
            warm.notes.append(f"{name}: skipped, engine/model {earlier.engine}/{earlier.model} is not "
                              f"{space.engine}/{space.model}")
            continue
        for trial in ranked_trials(source)[:top]:
            if problem := config_problem(space, dict(trial.params)):
                warm.notes.append(f"{name} trial {trial.number}: not valid in the new space ({problem})")
                continue
            key = config_key(with_derived(space, dict(trial.params)))
            if key not in seen:
                seen.add(key)
                warm.seeds.append((f"warm {name}#{trial.number}", dict(trial.params)))
        rejected = output_rejected(source) or {}
        for trial in source.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            reason = _broken_reason(trial, rejected)
            if reason is None or config_problem(space, dict(trial.params)):
                continue
            warm.broken.setdefault(config_key(with_derived(space, dict(trial.params))),
                                   f"{reason} (study {name}, trial {trial.number})")
        if warm.reference is None and (samples := reference_samples(source)) is not None:
            if earlier.check != space.check:
                warm.notes.append(f"{name}: reference not carried, its check settings differ")
            else:
                warm.reference = (samples, f"warm start: {source.user_attrs.get('reference_source', '?')} "
                                           f"of study {name}")
    return warm


def apply_warm_start(study: optuna.Study, study_dir: Path, space: Space, warm: WarmStart,
                     sources: list[str]) -> None:
    """Seeds first (before the space's own), the broken configs and the reference into the study."""
    enqueue_runs(study, warm.seeds, measure_again=False)
    enqueue_space_seeds(study, space)
    if warm.reference is not None and space.check.mode != "none":
        adopt_reference(study, study_dir, *warm.reference)
    study.set_user_attr("warm_start", warm.to_record(sources))


def format_warm_lines(warm: WarmStart) -> list[str]:
    lines = [f"warm start: seed {label} {' '.join(f'{k}={v}' for k, v in params.items())}"
             for label, params in warm.seeds]
    lines += [f"warm start: will skip a broken config: {reason}" for reason in warm.broken.values()]
    if warm.reference:
        lines.append(f"warm start: reference from {warm.reference[1]}")
    lines += [f"warm start: {note}" for note in warm.notes]
    return lines
