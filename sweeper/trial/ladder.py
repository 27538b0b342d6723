"""A trial's load ladder: loadgen/ladder.py's level loop, sent from where the host spec says
(loadgen/onhost.py), with the trial's hooks: each run's raw samples saved, the watchdog (a request
that stalls while the server lives is a hang; a dead server ends the ladder at once) and the
study's judgement of each level (an SLO broken, a ladder abandoned)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Sequence

from sweeper.loadgen.client import STALLED, LevelRun, StreamOptions, fit_to_dialect, is_stalled
from sweeper.loadgen.endpoints import RequestDialect
from sweeper.loadgen.ladder import LadderHooks, LoadPlan, Stop, build_prompts, run_ladder
from sweeper.loadgen.onhost import LoadPlace
from sweeper.outcomes import LevelMetrics
from sweeper.spec.space import Workload
from sweeper.trial.context import Failure


def build_stream_options(workload: Workload, dialect: RequestDialect,
                         stall_timeout_s: float | None = None) -> StreamOptions:
    """How load requests are sent: the workload's wishes, limited to what the server accepts."""
    wished = StreamOptions(timeout_s=workload.request_timeout_s,
                           stall_timeout_s=workload.stall_timeout_s or stall_timeout_s,
                           min_tokens=workload.min_tokens, continuous_usage=workload.continuous_usage_stats)
    return fit_to_dialect(wished, dialect)


def build_level_plan(workload: Workload, dialect: RequestDialect, time_scale: float = 1.0,
                     stall_timeout_s: float | None = None) -> LoadPlan:
    """The workload as the level loop's plan, in the server's dialect."""
    return LoadPlan.from_workload(workload, build_stream_options(workload, dialect, stall_timeout_s),
                                  time_scale, text_prompts=dialect.text_prompts)


def build_level_prompts(n: int, input_len: int, seed: int, dialect: RequestDialect) -> list[list[int]] | list[str]:
    """Token ids where the server takes them (exact input length), else text of about input_len tokens."""
    plan = LoadPlan(input_len=input_len, text_prompts=dialect.text_prompts,
                    options=StreamOptions(api=dialect.api))
    return build_prompts(plan, n, seed)


def measure_levels(plan: LoadPlan, place: LoadPlace, trial_dir: Path,
                   on_level: Callable[[int, dict], Failure | None],
                   still_alive: Callable[[], bool]) -> tuple[dict[int, LevelMetrics], Failure | None]:
    """The trial's ladder: (levels measured, the failure that ended it early or None)."""
    def send(prompts: list, concurrency: int) -> LevelRun:
        return place.run(prompts, plan.output_len, concurrency, plan.options)

    return run_ladder(plan, send, TrialLadderHooks(trial_dir, place.where, on_level, still_alive))


class TrialLadderHooks(LadderHooks):
    """Raw samples to samples/c<C>[.r<n>].json; the watchdog; the study's verdict per level."""

    def __init__(self, trial_dir: Path, where: str, on_level: Callable[[int, dict], Failure | None],
                 still_alive: Callable[[], bool]) -> None:
        self.samples_dir = trial_dir / "samples"
        self.samples_dir.mkdir(parents=True, exist_ok=True)
        self.where, self.on_level, self.still_alive = where, on_level, still_alive

    def warmup_done(self, concurrency: int, run: LevelRun) -> Stop | None:
        if hang := hang_of(run.samples, concurrency, "warmup", self.still_alive):
            return Stop(hang)
        # After a run with failed requests, a dead server ends the ladder at once: each further
        # run would only fail too (and, loading from the host, start a python there first).
        if _any_failed(run) and not self.still_alive():
            return Stop(_crashed(concurrency))
        return None

    def run_done(self, concurrency: int, repeat: int, run: LevelRun) -> Stop | None:
        suffix = "" if repeat == 0 else f".r{repeat + 1}"  # c<C>.json stays the first repeat
        (self.samples_dir / f"c{concurrency}{suffix}.json").write_text(json.dumps([asdict(s) for s in run.samples]))
        if hang := hang_of(run.samples, concurrency, "measured run", self.still_alive):
            return Stop(hang)
        if _any_failed(run) and not self.still_alive():
            return Stop(_crashed(concurrency), keep_level=True)
        return None

    def level_fields(self, concurrency: int) -> dict[str, Any]:
        return {"load_from": self.where}

    def level_done(self, concurrency: int, metrics: LevelMetrics) -> Stop | None:
        if not self.still_alive():
            return Stop(_crashed(concurrency))
        verdict = self.on_level(concurrency, metrics)
        return Stop(verdict) if verdict else None


def _crashed(concurrency: int) -> Failure:
    return Failure("load", "crash_under_load", f"server died at concurrency {concurrency}")


def _any_failed(run: LevelRun) -> bool:
    return not all(sample.ok for sample in run.samples)


def hang_of(samples: Sequence, concurrency: int, what: str, still_alive: Callable[[], bool]) -> Failure | None:
    """The failure of a level whose requests stalled while the server stayed up, or None."""
    stalled = [s for s in samples if is_stalled(s)]
    if not stalled:
        return None
    if not still_alive():
        return Failure("load", "crash_under_load", f"server died at concurrency {concurrency} ({what})")
    tokens = sum(s.streamed_tokens for s in stalled)
    return Failure("load", "hang", f"{len(stalled)} request(s) at concurrency {concurrency} ({what}) "
                   f"{stalled[0].error.removeprefix(STALLED).strip()} after {tokens} token(s) in all, "
                   "with the server still up: hung mid-load")
