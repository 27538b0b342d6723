"""A trial's load ladder: loadgen/ladder.py's level loop, sent from where the host spec says
(loadgen/onhost.py), with the trial's hooks: each run's raw samples saved, the watchdog (a request
that stalls while the server lives is a hang; a dead server ends the ladder at once) and the
study's judgement of each level (an SLO broken, a ladder abandoned)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Sequence

from sweeper.engines.base import first_stall_line
from sweeper.hosts.base import Host, ServerProcess
from sweeper.loadgen.client import STALLED, LevelRun, StreamOptions, fit_to_dialect, is_stalled
from sweeper.loadgen.endpoints import RequestDialect
from sweeper.loadgen.ladder import LadderHooks, LoadPlan, Stop, build_prompts, run_ladder
from sweeper.loadgen.onhost import LoadPlace
from sweeper.loadgen.vocab import model_vocab_size
from sweeper.outcomes import LevelMetrics
from sweeper.spec.space import Workload
from sweeper.trial.context import Failure
from sweeper.trial.launch import LogWatch


def build_stream_options(workload: Workload, dialect: RequestDialect,
                         stall_timeout_s: float | None = None) -> StreamOptions:
    """How load requests are sent: the workload's wishes, limited to what the server accepts."""
    wished = StreamOptions(timeout_s=workload.request_timeout_s,
                           stall_timeout_s=workload.stall_timeout_s or stall_timeout_s,
                           min_tokens=workload.min_tokens, continuous_usage=workload.continuous_usage_stats)
    return fit_to_dialect(wished, dialect)


def build_level_plan(workload: Workload, dialect: RequestDialect, time_scale: float = 1.0,
                     stall_timeout_s: float | None = None, vocab_size: int | None = None) -> LoadPlan:
    """The workload as the level loop's plan, in the server's dialect (token ids below the served
    model's vocabulary size)."""
    return LoadPlan.from_workload(workload, build_stream_options(workload, dialect, stall_timeout_s),
                                  time_scale, text_prompts=dialect.text_prompts, vocab_size=vocab_size)


def build_level_prompts(n: int, input_len: int, seed: int, dialect: RequestDialect,
                        vocab_size: int | None = None) -> list[list[int]] | list[str]:
    """Token ids where the server takes them (exact input length, below the served model's
    vocabulary size), else text of about input_len tokens."""
    plan = LoadPlan(input_len=input_len, text_prompts=dialect.text_prompts, vocab_size=vocab_size,
                    options=StreamOptions(api=dialect.api))
    return build_prompts(plan, n, seed)


def served_vocab_size(host: Host, model: str) -> int | None:
    """The model folder's vocabulary size as the host sees it (config.json, tokenizer.json), or
    None where `model` is no folder there (a hub name: the load keeps its default ids)."""
    def read(path: str) -> str | None:
        result = host.run(["cat", path], timeout_s=60)
        return result.stdout if result.returncode == 0 else None
    return model_vocab_size(read, model)


def stall_watch(host: Host, proc: ServerProcess, stall_lines: Sequence[str]) -> Callable[[], str | None]:
    """The first stall line (EngineInfo.stall_lines: a JIT compile) the server logged since the
    last call; the log is read on from here (start-up lines skipped)."""
    if not stall_lines:
        return lambda: None
    watch = LogWatch(host, proc)
    watch.poll()
    return lambda: first_stall_line(watch.poll(), stall_lines)


def measure_levels(plan: LoadPlan, place: LoadPlace, trial_dir: Path,
                   on_level: Callable[[int, dict], Failure | None], still_alive: Callable[[], bool],
                   new_stall: Callable[[], str | None] = lambda: None, server_pgid: int | None = None,
                   ) -> tuple[dict[int, LevelMetrics], Failure | None]:
    """The trial's ladder: (levels measured, the failure that ended it early or None).
    server_pgid: the server's process group when it runs on this machine (pinning.py)."""
    def send(prompts, concurrency: int, until=None) -> LevelRun:
        return place.run(prompts, plan.output_len, concurrency, plan.options, until)

    hooks = TrialLadderHooks(trial_dir, place.where, on_level, still_alive, new_stall, server_pgid)
    return run_ladder(plan, send, hooks)


def measure_native_levels(concurrency: Sequence[int], native_level: Callable[[int], dict],
                          on_level: Callable[[int, dict], Failure | None], still_alive: Callable[[], bool],
                          ) -> tuple[dict[int, LevelMetrics], Failure | None]:
    """workload.load: native: each level measured by the engine's own benchmark (trial/native.py)."""
    levels: dict[int, LevelMetrics] = {}
    for c in concurrency:
        levels[c] = metrics = native_level(c)
        if not still_alive():
            return levels, _crashed(c)
        if verdict := on_level(c, metrics):
            return levels, verdict
    return levels, None


class TrialLadderHooks(LadderHooks):
    """Raw samples to samples/c<C>[.r<n>].json; the watchdog; a compile stall during a measured
    run makes it invalid (one during the warm-up is what the warm-up is for); the study's verdict
    per level."""

    def __init__(self, trial_dir: Path, where: str, on_level: Callable[[int, dict], Failure | None],
                 still_alive: Callable[[], bool], new_stall: Callable[[], str | None] = lambda: None,
                 server_pgid: int | None = None) -> None:
        self.samples_dir = trial_dir / "samples"
        self.samples_dir.mkdir(parents=True, exist_ok=True)
        self.where, self.on_level, self.still_alive, self.new_stall = where, on_level, still_alive, new_stall
        self._server_pgid = server_pgid

    def server_pgid(self) -> int | None:
        return self._server_pgid if self.where == "controller" else None

    def run_notes(self, concurrency: int) -> list[str]:
        stall = self.new_stall()
        return [f"the server stalled on a compile during the measured run: {stall[-200:]}"] if stall else []

    def warmup_done(self, concurrency: int, run: LevelRun) -> Stop | None:
        self.new_stall()  # a compile while warming up is allowed
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
