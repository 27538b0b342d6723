"""`sweeper campaign`: the case study as one unattended run, a small state machine over the
existing pieces: sweep (run_sweep) -> validate (the finalists on fresh servers, interleaved, until
the winner separates from the runner-up: validation.py) -> profile (sweeper profile's
profile_study_trial) -> report (results/report.py) -> script (results/script.py) -> done.

The phase lives in the study (`campaign_phase`; settings and what each finished phase produced in
`campaign`), so `sweeper resume` continues at the phase a killed run was in: finished trials, runs
and phases are read back, never redone."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Protocol

import optuna
from optuna.trial import TrialState

from sweeper.errors import UserError
from sweeper.hosts import Host, open_host
from sweeper.spec.space import Space
from sweeper.workflows.ablation import Measured, finalist_runs
from sweeper.study.store import StudyHandle, SweepEvents, load_study, study_exists, storage_url
from sweeper.study.storage import open_storage
from sweeper.study.objective import evaluations
from sweeper.study.runs import measured_runs, recover_interrupted, run_queue, run_sweep
from sweeper.study.trials import is_pareto_study, ranked_trials
from sweeper.study.noise import NoiseFloor, best_repeats
from sweeper.workflows.validation import (PLANNED_ATTR, create_validation_study, enqueue_planned, is_half_made,
                                       launch_costs, noise_floor_of, plan_runs, plan_validation, record_noise_floor,
                                       record_validation)
from sweeper.profile.command import PROFILE_ATTR_PREFIX, profile_study_trial
from sweeper.profile.control import PROFILERS
from sweeper.results.campaign_summary import build_campaign_summary
from sweeper.results.report import build_report, write_report
from sweeper.results.script import best_launch_script

PHASES = ("sweep", "validate", "profile", "report", "script", "done")
PHASE_ATTR = "campaign_phase"
CAMPAIGN_ATTR = "campaign"
SWEEP_SHARE = 0.6  # of --time-budget: the sweep stops starting trials there, leaving the rest to validation
SCRIPT_FILE = "serve-winner.sh"


@dataclass(frozen=True)
class CampaignSettings:
    time_budget_s: float | None = None
    finalists: int = 3  # K: the sweep's best configs re-measured first
    repeats: int = 2  # R: fresh servers each in the first rounds
    max_repeats: int = 6  # runs of one finalist before an unresolved top is declared a tie
    max_launches: int | None = None  # sweep evaluations + validation launches, in all
    seed: int | None = None
    profile_seconds: float = 5.0
    max_in_launch_repeats: int = 5  # the most repeats of a level one validation launch measures


class CampaignIO(Protocol):
    """What the command line gives the campaign: running trials with progress shown (and the
    host closed after), and one line of news."""

    def run_trials(self, handle: StudyHandle, host: Host, run: Callable[[SweepEvents], None]) -> None: ...
    def say(self, line: str) -> None: ...


def describe_noise(floor: NoiseFloor) -> str:
    """The noise floor in words: 'noise floor: between-launch CV 1.8%, within-launch CV 0.9% (6
    launches x 2 repeats)'."""
    def pct(cv: float | None) -> str:
        return "unknown" if cv is None else f"{cv:.1%}"
    return (f"noise floor: between-launch CV {pct(floor.between_cv)}, within-launch CV {pct(floor.within_cv)} "
            f"({floor.launches} launches x {floor.repeats} repeats)")


def is_campaign(study: optuna.Study) -> bool:
    return PHASE_ATTR in study.user_attrs


def sweep_budget(space: Space, trials: int | None, max_launches: int | None, finalists: int) -> int:
    """The sweep's evaluations: --trials (else the space's budget), within --max-launches less the room
    for the finalists' first rounds (two runs each) and the profile's launch."""
    if max_launches is not None and trials is not None and trials >= max_launches:
        raise UserError(f"--max-launches {max_launches}: leaves no launch for validation after --trials {trials}")
    budget = trials or space.budget.trials
    if max_launches is not None:
        budget = min(budget, max_launches - 2 * finalists - int(space.engine in PROFILERS))
        if budget < 1:
            raise UserError(f"--max-launches {max_launches}: no room for a sweep and {finalists} finalists x 2 runs")
    return budget


def start_campaign(study: optuna.Study, settings: CampaignSettings) -> None:
    if is_pareto_study(study):
        raise UserError("campaign: the Pareto mode (two objectives) has no single winner to separate; "
                        "run `sweeper sweep` and `sweeper validate`")
    study.set_user_attr(CAMPAIGN_ATTR, {"settings": asdict(settings), "phases": {}, "started_at": time.time()})
    study.set_user_attr(PHASE_ATTR, PHASES[0])


def campaign_record(study: optuna.Study) -> dict:
    return dict(study.user_attrs.get(CAMPAIGN_ATTR) or {"settings": {}, "phases": {}})


def campaign_settings(study: optuna.Study) -> CampaignSettings:
    return CampaignSettings(**campaign_record(study)["settings"])


def _finish_phase(study: optuna.Study, phase: str, produced: dict, started: float) -> None:
    """What the phase produced and its wall seconds (this run's), then the next phase: one write
    each, the phase last, so a kill between them repeats only an idempotent record."""
    record = campaign_record(study)
    earlier = record["phases"].get(phase, {}).get("seconds", 0.0)
    record["phases"][phase] = {**produced, "seconds": earlier + time.time() - started, "finished_at": time.time()}
    study.set_user_attr(CAMPAIGN_ATTR, record)
    study.set_user_attr(PHASE_ATTR, PHASES[PHASES.index(phase) + 1])


def trial_seconds(study: optuna.Study) -> float:
    """Wall seconds of the finished trials (what a killed run spent counts too)."""
    return sum((t.datetime_complete - t.datetime_start).total_seconds()
               for t in study.get_trials(deepcopy=False) if t.datetime_start and t.datetime_complete)


@dataclass
class Campaign:
    handle: StudyHandle
    io: CampaignIO
    hosts_path: Path
    storage: str | None

    @property
    def study(self) -> optuna.Study:
        return self.handle.study

    @property
    def settings(self) -> CampaignSettings:
        return campaign_settings(self.study)

    def run(self) -> None:
        """Every phase from the stored one to the end."""
        steps = {"sweep": self.sweep, "validate": self.validate, "profile": self.profile,
                 "report": self.report, "script": self.script}
        while (phase := self.study.user_attrs[PHASE_ATTR]) != "done":
            self.io.say(f"campaign phase: {phase}")
            started = time.time()
            _finish_phase(self.study, phase, steps[phase](), started)

    # ------------------------------------------------------------ phases

    def sweep(self) -> dict:
        settings = self.settings
        left = None
        if settings.time_budget_s is not None:
            left = max(0.0, SWEEP_SHARE * settings.time_budget_s - trial_seconds(self.study))
        if left is None or left > 0:
            host = open_host(self.handle.host_name, self.handle.host_spec)
            self.io.run_trials(self.handle, host,
                               lambda events: run_sweep(self.handle, host, events, settings.seed, left))
        ranked = ranked_trials(self.study)
        if not ranked:
            raise UserError(f"campaign: the sweep of {self.study.study_name!r} found no feasible config; "
                            "see `sweeper show` for why each failed")
        return {"evaluations": evaluations(self.study), "best_trial": ranked[0].number,
                "best_value": ranked[0].values[0]}

    def validation_study(self) -> StudyHandle:
        """The campaign's validation study: created once (its first round planned, then queued),
        loaded again on resume, where what a kill left unqueued of a planned round is queued."""
        name = f"{self.study.study_name}-validate"
        results = self.handle.results_dir
        url = storage_url(results, name, self.storage)
        (results / name).mkdir(parents=True, exist_ok=True)
        _, first_round = finalist_runs(self.study, self.settings.finalists, self.settings.repeats)
        study = None
        if study_exists(open_storage(url), name):
            study = load_study(name, results, self.storage)
            if is_half_made(study):  # killed inside its set-up: reference and source may be missing
                self.io.say(f"validation: the set-up of {name!r} was cut short; made again")
                optuna.delete_study(study_name=name, storage=url)
                study = None
        if study is None:
            study = create_validation_study(self.study, name, results, self.storage, self.handle.host_name,
                                            self.handle.host_spec, len(first_round)).study
        if PLANNED_ATTR not in study.user_attrs and not study.get_trials(deepcopy=False):
            # the first round, before any is queued; two repeats in each launch from the start, so
            # the first round measures both parts of the noise floor (a steady level's repeat is
            # seconds, its launch a minute or more)
            plan_runs(study, [label for label, _ in first_round], max(2, self.handle.space.workload.repeats))
        if missing := enqueue_planned(study, self.finalist_params()):
            self.io.say(f"validation: queued {', '.join(missing)}")
        return StudyHandle(study, self.handle.space, self.handle.host_name, self.handle.host_spec, results)

    def finalist_params(self) -> dict[str, dict]:
        """label ("trial N") -> config of every sweep trial."""
        return {f"trial {t.number}": dict(t.params) for t in self.study.get_trials(deepcopy=False)}

    def validate(self) -> dict:
        settings, maximize = self.settings, self.handle.space.objective.direction == "maximize"
        validation = self.validation_study()
        candidates = [(f"trial {t.number}", t.values[0]) for t in ranked_trials(self.study)]
        self._recover_validation(validation)  # a run a kill left interrupted is queued again before planning
        while True:
            waiting = validation.study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING))
            if waiting:
                self._run_validation_queue(validation)
                continue
            launched = evaluations(self.study) + evaluations(validation.study) + self.profile_launches()
            launches_left = (settings.max_launches - launched) if settings.max_launches else 10 ** 9
            time_left = None
            if settings.time_budget_s is not None:
                time_left = settings.time_budget_s - trial_seconds(self.study) - trial_seconds(validation.study)
            runs = [Measured(label, value) for label, value in measured_runs(validation.study)]
            floor = noise_floor_of(validation.study, self.handle.space.objective_level)
            record_noise_floor((self.study, validation.study), floor)
            plan = plan_validation(runs, candidates, maximize, settings.max_repeats, launches_left, time_left)
            if not plan.runs:
                break
            repeats = self.next_repeats(floor, validation.study)
            self.io.say(f"validation: another round of {', '.join(plan.runs)}; {describe_noise(floor)}"
                        + (f"; {repeats} repeats per launch" if repeats else ""))
            plan_runs(validation.study, plan.runs, repeats)
            enqueue_planned(validation.study, self.finalist_params())
        verdict = plan.verdict
        rows = record_validation(self.study, validation.study, maximize, verdict)
        if verdict["winner"] is None:
            raise UserError("campaign: every finalist failed on re-run; see the validation study "
                            f"{validation.name!r}")
        return {"study": validation.name, "launches": evaluations(validation.study), "verdict": verdict,
                "rows": rows}

    def next_repeats(self, floor: NoiseFloor, validation: optuna.Study) -> int | None:
        """In-launch repeats for the next round's launches, where the noise floor is known: more
        repeats where launches agree and repeats do not, more launches (1 repeat) where launches
        differ (noise.best_repeats, costs from this campaign's own launches); None: the space's."""
        if floor.between_cv is None or floor.within_cv is None:
            return None
        launch_s, repeat_s = launch_costs(validation)
        return best_repeats(floor, launch_s, repeat_s, self.settings.max_in_launch_repeats)

    def _recover_validation(self, validation: StudyHandle) -> None:
        """Servers a dead controller left (found by their run tokens), its runs marked failed and
        queued again: also where nothing is left waiting (a kill inside an earlier recovery)."""
        host = open_host(validation.host_name, validation.host_spec)
        try:
            for note in recover_interrupted(validation.study, host, self.handle.space.launch.stop_grace_s):
                self.io.say(f"recovery: {note}")
        finally:
            host.close()

    def _run_validation_queue(self, validation: StudyHandle) -> None:
        host = open_host(validation.host_name, validation.host_spec)
        self.io.run_trials(validation, host, lambda events: run_queue(validation, host, events))

    def profile_launches(self) -> int:
        """The launch the profile phase will spend (held back from validation's share): 1 where the
        engine has a profiler and no profile is stored yet."""
        stored = any(key.startswith(PROFILE_ATTR_PREFIX) for key in self.study.user_attrs)
        return int(self.handle.space.engine in PROFILERS and not stored)

    def winner(self) -> int:
        verdict = campaign_record(self.study)["phases"]["validate"]["verdict"]
        return int(verdict["winner"].split()[-1])

    def profile(self) -> dict:
        winner = self.winner()
        engine = self.handle.space.engine
        if engine not in PROFILERS:
            return {"skipped": f"engine {engine} has no torch profiler endpoint"}
        if f"{PROFILE_ATTR_PREFIX}{winner}" in self.study.user_attrs:
            return {"trial": winner, "kept": "a stored profile"}
        try:
            result = profile_study_trial(self.study, self.handle.results_dir, self.hosts_path, winner, False, None,
                                         self.settings.profile_seconds, 15, on_step=self.io.say)
        except UserError as exc:  # a profile is a help, not the campaign's goal
            self.io.say(f"profile failed: {exc}")
            return {"trial": winner, "failed": str(exc)}
        return {"trial": winner, "dir": str(result.dir), "groups": {g["group"]: g["share"] for g in
                                                                       result.record["groups"]}}

    def report(self) -> dict:
        validation = load_study(campaign_record(self.study)["phases"]["validate"]["study"],
                                self.handle.results_dir, self.storage)
        self.study.set_user_attr("campaign_summary", build_campaign_summary(self.study, validation))
        written = write_report(build_report(self.study), self.handle.dir)
        return {"files": [str(p) for p in written[:2]]}

    def script(self) -> dict:
        winner = self.winner()
        trial = next(t for t in self.study.get_trials(deepcopy=False) if t.number == winner)
        text = best_launch_script(self.study, self.handle.space, self.handle.host_spec, trial)
        path = self.handle.dir / SCRIPT_FILE
        path.write_text(text)
        path.chmod(0o755)
        return {"file": str(path)}
