"""The study's reference outputs for the correctness gate: a file the user gives, the named seed's
outputs, or the outputs of two different configs that agree within the gate's tolerance (so a
garbage first trial cannot become the reference). Kept in the study (user attrs) and written to
<study dir>/reference.json, which `check.reference_file` can name in a later study."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Sequence

import optuna
from optuna.trial import TrialState

from sweeper.spec.space import Space
from sweeper.trial.gate import OutputSample, agree, judge, load_reference_file, write_reference_file
from sweeper.study.stored import output_rejected

REFERENCE_FILE = "reference.json"


def reference_samples(study: optuna.Study) -> list[OutputSample] | None:
    stored = study.user_attrs.get("reference_samples")
    return [OutputSample.from_dict(s) for s in stored] if stored else None


def _set(study: optuna.Study, study_dir: Path, samples: Sequence[OutputSample], source: str) -> None:
    study.set_user_attr("reference_samples", [asdict(s) for s in samples])
    study.set_user_attr("reference_text", samples[0].text)  # what reports show
    study.set_user_attr("reference_source", source)
    write_reference_file(study_dir / REFERENCE_FILE, samples, source)


def adopt_reference(study: optuna.Study, study_dir: Path, samples: Sequence[OutputSample], source: str) -> None:
    """Take a reference settled elsewhere (warm start: an earlier study of the same model)."""
    _set(study, study_dir, samples, source)


def use_reference_file(study: optuna.Study, space: Space, study_dir: Path, base: Path | None = None) -> None:
    """Adopt `check.reference_file` (relative to the space file's folder) before the first trial."""
    name = space.check.reference_file
    if name is None or reference_samples(study) is not None:
        return
    path = Path(name).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    _set(study, study_dir, load_reference_file(path, space.check), f"file {path}")


def settle_reference(study: optuna.Study, space: Space, study_dir: Path, trial: optuna.Trial,
                     samples: Sequence[OutputSample] | None) -> None:
    """Make `samples` (a trial that passed the gate) the reference when it comes from the named
    seed or agrees with a different config's; then judge the trials measured before it."""
    if not samples or reference_samples(study) is not None or space.check.mode == "none":
        return
    named = study.user_attrs.get("reference_seed", space.reference)
    source = None
    if named is not None and trial.user_attrs.get("seed") == named:
        source = f"seed {named} (trial {trial.number})"
    else:
        key = trial.user_attrs.get("config_key")
        for other in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            others = other.user_attrs.get("output_samples")
            failed_at = (other.user_attrs.get("failure") or {}).get("stage")
            if (others and failed_at not in ("preflight", "launch", "wait_ready", "check_output")
                    and other.user_attrs.get("config_key") != key
                    and agree([OutputSample.from_dict(s) for s in others], samples, space.check)):
                source = f"agreement of trials {other.number} and {trial.number}"
                break
    if source is None:
        return
    _set(study, study_dir, samples, source)
    reject_earlier(study, space, samples, trial.number)


def reject_earlier(study: optuna.Study, space: Space, reference: Sequence[OutputSample], settled_by: int) -> dict[str, str]:
    """Trials that passed only the garbage detector and disagree with the new reference, kept as
    the study's `output_rejected` (trial number -> why): the leaderboard ranks them out. A finished
    trial's own attrs cannot change, hence the study attr."""
    rejected = dict(output_rejected(study) or {})
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        stored = t.user_attrs.get("output_samples")
        if t.number == settled_by or not stored or "failure" in t.user_attrs:
            continue
        verdict = judge([OutputSample.from_dict(s) for s in stored], reference, space.check)
        if not verdict.passed:
            rejected[str(t.number)] = "; ".join(verdict.reasons)
    if rejected:
        study.set_user_attr("output_rejected", rejected)
    return rejected
