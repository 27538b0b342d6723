"""A trial's load ladder: loadgen/ladder.py's level loop, sent from where the host spec says
(loadgen/onhost.py), with the trial's hooks: each run's raw samples saved, the watchdog (a request
that stalls while the server lives is a hang; a dead server ends the ladder at once) and the
study's judgement of each level (an SLO broken, a ladder abandoned)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from sweeper.engines.adapter import EngineInfo, first_stall_line
from sweeper.hosts.base import Host, ServerProcess
from sweeper.loadgen.capacity import CapacitySearch, CapacitySlo, capacity_record, find_capacity
from sweeper.loadgen.client import STALLED, LevelRun, StreamOptions, fit_to_dialect, is_stalled
from sweeper.loadgen.endpoints import RequestDialect
from sweeper.loadgen.ladder import LadderHooks, LoadPlan, Stop, build_prompts, run_ladder
from sweeper.loadgen.onhost import LoadPlace
from sweeper.loadgen.probe import LevelProbe
from sweeper.loadgen.workload import tokenizer_from_file
from sweeper.loadgen.vocab import model_vocab_size
from sweeper.levels import Level, Rate, describe_level, is_rate, level_label
from sweeper.outcomes import PER_GPU_METRIC, FailureKind, LevelMetrics, Stage
from sweeper.spec.space import Space, Workload
from sweeper.trial.context import Failure
from sweeper.trial.energy import PowerMeter
from sweeper.trial.launch import LogWatch


def build_stream_options(workload: Workload, dialect: RequestDialect,
                         stall_timeout_s: float | None = None) -> StreamOptions:
    """How load requests are sent: the workload's wishes, limited to what the server accepts."""
    wished = StreamOptions(timeout_s=workload.request_timeout_s,
                           stall_timeout_s=workload.stall_timeout_s or stall_timeout_s,
                           min_tokens=workload.min_tokens, continuous_usage=workload.continuous_usage_stats)
    return fit_to_dialect(wished, dialect)


def build_level_plan(workload: Workload, dialect: RequestDialect, time_scale: float = 1.0,
                     stall_timeout_s: float | None = None, vocab_size: int | None = None,
                     probe: LevelProbe | None = None, engine_measure: str = "rounds") -> LoadPlan:
    """The workload as the level loop's plan, in the server's dialect (token ids below the served
    model's vocabulary size), with the server's side (cache flush, hit rate, token counts), its
    levels measured as the engine measures them under `measure: auto` (EngineInfo.measure)."""
    workload = workload.for_engine(engine_measure)
    return LoadPlan.from_workload(workload, build_stream_options(workload, dialect, stall_timeout_s),
                                  time_scale, text_prompts=dialect.text_prompts, vocab_size=vocab_size, probe=probe)


def build_level_probe(base_url: str, model: str, info: EngineInfo, workload: Workload) -> LevelProbe:
    """What the trial asks its server around each level, as its engine declares it; token counts
    from the workload's tokenizer file when it names one, else the engine's /tokenize."""
    tokenizer = tokenizer_from_file(workload.tokenizer) if workload.tokenizer else None
    return LevelProbe(base_url, model, info.prefix_cache, info.tokenize, tokenizer)


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


@dataclass(frozen=True)
class LadderRun:
    """A trial's ladder as one value: the plan, where its load is sent from, the trial folder (raw
    samples), the study's verdict on each level, the watchdog's probes (the server alive, a stall
    line logged), the GPUs the config runs on (per-GPU metrics) and a running meter of their power,
    and the server's process group when it runs on this machine (pinning.py)."""
    plan: LoadPlan
    place: LoadPlace
    trial_dir: Path
    on_level: Callable[[Level, dict], Failure | None]
    still_alive: Callable[[], bool]
    new_stall: Callable[[], str | None] = lambda: None
    gpus: int | None = None
    power: PowerMeter | None = None
    server_pgid: int | None = None


def capacity_search(space: Space) -> CapacitySearch:
    """The space's capacity search: its SLO, and the workload's rate or concurrency bounds."""
    workload = space.workload
    ceiling, resolution = ((workload.capacity_max_rate, workload.capacity_rate_resolution) if workload.open_loop
                           else (workload.capacity_max_concurrency, workload.capacity_resolution))
    return CapacitySearch(CapacitySlo(space.slo.p99_ttft_ms, space.slo.p99_tpot_ms), ceiling, resolution,
                          rate=workload.open_loop)


def measure_levels(run: LadderRun) -> tuple[dict[Level, LevelMetrics], Failure | None]:
    """The trial's ladder: (levels measured, the failure that ended it early or None); the
    levels are concurrencies, or rates (open loop) when the plan has rates."""
    plan, place = run.plan, run.place

    def send(prompts, concurrency: int, until=None, offsets: list[float] | None = None) -> LevelRun:
        return place.run(prompts, plan.output_len, concurrency, plan.options, until, offsets=offsets)

    return run_ladder(plan, send, TrialLadderHooks(run))


class _LadderStopped(Exception):
    def __init__(self, verdict: Failure) -> None:
        self.verdict = verdict


def measure_capacity(run: LadderRun, search: CapacitySearch,
                     ) -> tuple[dict[Level, LevelMetrics], dict | None, Failure | None]:
    """objective max_load_within_slo: the capacity search (loadgen/capacity.py) with each load a
    level of the trial's ladder (samples, watchdog, the study's verdict): (levels measured, the
    search's record, the failure that ended it early or None). A plan with rates searches the
    rate (an open loop, from its first rate; the resolution relative), else the concurrency from 1."""
    levels: dict[Level, LevelMetrics] = {}
    plan = run.plan
    by_rate = bool(plan.rates)

    def measure(load: float) -> LevelMetrics:
        level: Level = Rate(load) if by_rate else int(load)
        one = replace(plan, rates=(float(load),)) if by_rate else replace(plan, concurrency=(level,))
        measured, verdict = measure_levels(replace(run, plan=one))
        levels.update(measured)
        if verdict is not None:
            raise _LadderStopped(verdict)
        return measured[level]

    try:
        found = find_capacity(measure, search.slo, start=plan.rates[0] if by_rate else 1, ceiling=search.ceiling,
                              resolution=search.resolution, relative=by_rate, integer=not by_rate)
    except _LadderStopped as stopped:
        return levels, None, stopped.verdict
    return levels, capacity_record(found, "rate" if by_rate else "concurrency", search.slo, _validity), None


def _validity(metrics: LevelMetrics) -> dict:
    """What a trial's capacity record keeps of each level beside its verdict (the metrics
    themselves are in the trial's levels)."""
    return {"valid": metrics.get("valid"), "invalid_reasons": metrics.get("invalid_reasons") or []}


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
    """Raw samples to samples/c<C>[.r<n>].json (r<rate>[.r<n>].json for a rate level); the watchdog; a compile stall during a measured
    run makes it invalid (one during the warm-up is what the warm-up is for); the study's verdict
    per level."""

    def __init__(self, run: LadderRun) -> None:
        self.samples_dir = run.trial_dir / "samples"
        self.samples_dir.mkdir(parents=True, exist_ok=True)
        self.where, self.on_level, self.still_alive, self.new_stall = (run.place.where, run.on_level, run.still_alive,
                                                                       run.new_stall)
        self.gpus, self.power, self.time_scale = run.gpus, run.power, run.plan.time_scale
        self.energy: dict[Level, list[tuple[float, float, int]]] = {}  # level -> (J, wall s, tokens) per run
        self._server_pgid = run.server_pgid

    def server_pgid(self) -> int | None:
        return self._server_pgid if self.where == "controller" else None

    def run_notes(self, level: Level) -> list[str]:
        stall = self.new_stall()
        return [f"the server stalled on a compile during the measured run: {stall[-200:]}"] if stall else []

    def warmup_done(self, level: Level, run: LevelRun) -> Stop | None:
        self.new_stall()  # a compile while warming up is allowed
        if hang := hang_of(run.samples, level, "warmup", self.still_alive):
            return Stop(hang)
        # After a run with failed requests, a dead server ends the ladder at once: each further
        # run would only fail too (and, loading from the host, start a python there first).
        if _any_failed(run) and not self.still_alive():
            return Stop(_crashed(level))
        return None

    def run_done(self, level: Level, repeat: int, run: LevelRun) -> Stop | None:
        if self.power is not None:
            end = time.monotonic()  # the run just returned: it spanned its duration up to now
            joules = self.power.energy_j(end - run.duration_s, end)
            if joules is not None:
                tokens = sum(s.output_tokens for s in run.samples if s.ok)
                self.energy.setdefault(level, []).append((joules, run.duration_s, tokens))
        suffix = "" if repeat == 0 else f".r{repeat + 1}"  # c<C>.json stays the first repeat
        (self.samples_dir / f"{level_label(level)}{suffix}.json").write_text(
            json.dumps([asdict(s) for s in run.samples]))
        if hang := hang_of(run.samples, level, "measured run", self.still_alive):
            return Stop(hang)
        if _any_failed(run) and not self.still_alive():
            return Stop(_crashed(level), keep_level=True)
        return None

    def level_fields(self, level: Level, metrics: LevelMetrics) -> dict[str, Any]:
        rate = {"request_rate": float(level)} if is_rate(level) else {}  # asked; achieved_request_rate beside it
        return {"load_from": self.where, **rate, **per_gpu_fields(metrics, self.gpus),
                **energy_fields(self.energy.get(level, []), self.time_scale)}

    def level_done(self, level: Level, metrics: LevelMetrics) -> Stop | None:
        if not self.still_alive():
            return Stop(_crashed(level))
        verdict = self.on_level(level, metrics)
        return Stop(verdict) if verdict else None


def per_gpu_fields(metrics: LevelMetrics, gpus: int | None) -> dict[str, Any]:
    """The level's output tok/s per GPU the config runs on (None when that count is unknown)."""
    throughput = metrics.get("output_throughput")
    per_gpu = throughput / gpus if gpus and throughput is not None else None
    return {"gpus": gpus, PER_GPU_METRIC: per_gpu}


def energy_fields(runs: list[tuple[float, float, int]], time_scale: float = 1.0) -> dict[str, Any]:
    """Mean power and joules per output token over a level's measured runs ((J, wall s, tokens)
    each). Under a time-scaled simulator the joules are in modelled time, as every duration is."""
    joules, wall, tokens = (sum(run[i] for run in runs) for i in range(3))
    return {"power_w_mean": joules / wall if wall > 0 else None,
            "energy_j_per_output_token": joules / time_scale / tokens if tokens > 0 else None}


def _crashed(level: Level) -> Failure:
    return Failure(Stage.LOAD, FailureKind.CRASH_UNDER_LOAD, f"server died at {describe_level(level)}")


def _any_failed(run: LevelRun) -> bool:
    return not all(sample.ok for sample in run.samples)


def hang_of(samples: Sequence, level: Level, what: str, still_alive: Callable[[], bool]) -> Failure | None:
    """The failure of a level whose requests stalled while the server stayed up, or None."""
    stalled = [s for s in samples if is_stalled(s)]
    if not stalled:
        return None
    if not still_alive():
        return Failure(Stage.LOAD, FailureKind.CRASH_UNDER_LOAD, f"server died at {describe_level(level)} ({what})")
    tokens = sum(s.streamed_tokens for s in stalled)
    return Failure(Stage.LOAD, FailureKind.HANG, f"{len(stalled)} request(s) at {describe_level(level)} ({what}) "
                   f"{stalled[0].error.removeprefix(STALLED).strip()} after {tokens} token(s) in all, "
                   "with the server still up: hung mid-load")
