"""Profile one config: relaunch it on the trial's own launch path (trial/launch.py: preflight,
flag check, GPU gate, launch, wait_ready, and always the stop), check its output, warm it up, run
the engine's torch profiler while our load generator holds C requests in flight for S seconds
(the trial's watchdog on: a hang ends the profile), fetch the traces and parse them into a kernel
table."""

from __future__ import annotations

import math
import os
import posixpath
import shutil
import time
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from sweeper.engines.adapter import Engine
from sweeper.errors import PortClash, UserError
from sweeper.hosts.base import Host, LaunchIntent, ServerProcess, StopReport
from sweeper.loadgen.client import run_level
from sweeper.loadgen.ladder import LoadPlan, build_prompts
from sweeper.profile.control import (
    TRACE_SUBDIR, ProfilerControl, build_profiler_argv, build_profiler_env, call_profiler, profiler_for,
)
from sweeper.profile.fetch import fetch_traces, wait_for_traces
from sweeper.profile.trace import (
    DeviceBusy, GroupShare, KernelTable, TraceError, group_shares, load_trace, summarize_traces,
)
from sweeper.spec.hosts import HostSpec
from sweeper.spec.space import Space
from sweeper.outcomes import FailureKind, Stage
from sweeper.trial.context import Failure, TrialContext, TrialOutcome
from sweeper.trial.gate import OutputSample
from sweeper.trial.load_ladder import build_level_plan, hang_of, served_vocab_size
from sweeper.trial.launch import LaunchedServer, launched_server
from sweeper.trial.pipeline import check_server_output

MAX_PROFILED_REQUESTS = 20_000


@dataclass(frozen=True)
class ProfileRequest:
    concurrency: int
    seconds: float
    warmup_rounds: int = 1
    trace_timeout_s: float = 300.0  # big GPU traces take a while to write and compress
    settle_s: float = 2.0
    profiler_call_timeout_s: float = 600.0  # SGLang's /stop_profile returns after writing the trace


@dataclass(frozen=True)
class ProfileContext:
    space: Space
    engine: Engine
    host: Host
    host_spec: HostSpec
    profile_dir: Path
    reference_samples: Sequence[OutputSample] | None = None  # the study's reference (correctness gate)
    known_servers: Callable[[], list[ServerProcess]] = lambda: []
    known_flags: Mapping[str, list[str] | None] | None = None
    engine_version: str = ""  # the installed engine's version (how its profiler is switched on)
    on_intent: Callable[[LaunchIntent], None] = lambda intent: None  # before the spawn
    on_started: Callable[[ServerProcess], None] = lambda proc: None
    on_stopped: Callable[[ServerProcess], None] = lambda proc: None
    on_step: Callable[[str], None] = lambda message: None


@dataclass
class ProfileRun:
    table: KernelTable
    groups: list[GroupShare]
    busy: list[DeviceBusy]
    trace_files: list[Path]
    load: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


def profiled_request_count(concurrency: int, seconds: float, round_s: float) -> int:
    """Enough closed-loop rounds of C requests to keep the server busy for `seconds`."""
    rounds = max(1, math.ceil(seconds / max(round_s, 1e-3)))
    return min(rounds * concurrency, max(MAX_PROFILED_REQUESTS, concurrency))


def drive_load(server: LaunchedServer, plan: LoadPlan, concurrency: int, seconds: float,
               round_s: float) -> dict[str, Any]:
    """Closed-loop load at `concurrency` for at least `seconds`: runs of whole rounds, each sized
    from the rounds before it, until the time is used (fresh prompts throughout). A request that
    stalls while the server lives is a hang: the profile ends (UserError)."""
    samples: list = []
    started = time.perf_counter()
    batch = 0
    while (elapsed := time.perf_counter() - started) < seconds and batch < 1000:
        n = profiled_request_count(concurrency, seconds - elapsed, round_s)
        seed = plan.seed + 30_000 + 1000 * batch + concurrency  # fresh prompts: no prefix-cache hits
        run = _run_closed(server, plan, build_prompts(plan, n, seed), concurrency, "profiled load")
        samples += run.samples
        round_s = run.duration_s / max(math.ceil(n / concurrency), 1)
        batch += 1
        if not any(s.ok for s in run.samples):
            break  # the server stopped answering: no point sending more
    ok = [s for s in samples if s.ok]
    return {"requests": len(samples), "completed": len(ok), "failed": len(samples) - len(ok),
            "seconds": round(time.perf_counter() - started, 3), "runs": batch,
            "output_tokens": sum(s.output_tokens for s in ok)}


def _run_closed(server: LaunchedServer, plan: LoadPlan, prompts: list, concurrency: int, what: str):
    """One closed-loop run; a hang (the trial's watchdog) raises UserError."""
    run = run_level(server.base_url, server.model, prompts, plan.output_len, concurrency, options=plan.options)
    if hang := hang_of(run.samples, concurrency, what, server.still_alive):
        raise UserError(f"the profile ends: {hang.message}")
    return run


PORT_TRIES = 3  # launches of a profile whose port another process took (as a trial's retries)


def profile_config(ctx: ProfileContext, config: Mapping[str, Any], request: ProfileRequest) -> ProfileRun:
    control = profiler_for(ctx.space.engine, ctx.engine_version)
    avoid: frozenset[int] = frozenset()
    for attempt in range(1, PORT_TRIES + 1):
        if ctx.profile_dir.exists():
            shutil.rmtree(ctx.profile_dir)  # a previous profile of this trial: ours to replace
        outcome, trial_ctx = TrialOutcome(config=dict(config)), replace(_trial_context(ctx), avoid_ports=avoid)
        stop_warnings: list[str] = []
        try:
            with launched_server(trial_ctx, config, outcome, extra_env=build_profiler_env(control),
                                 extra_argv=build_profiler_argv(control),
                                 on_stopped=partial(_stopped, ctx, stop_warnings)) as server:
                if server is None and outcome.failure.kind != FailureKind.PORT_BUSY:
                    raise _not_profiled(ctx, outcome.failure)  # after the stop, as the block ends
                if server is not None:
                    files, load, warnings = _profile_under_load(ctx, trial_ctx, server, request, control)
            if server is None:  # a port found taken before the launch: no clash to retry
                raise _not_profiled(ctx, outcome.failure)
        except PortClash as exc:  # raised after the stop: another process took a port meanwhile
            if attempt == PORT_TRIES:
                raise UserError(f"the profile's server found its port taken {PORT_TRIES} times: {exc}") from None
            ctx.on_step(str(exc))
            avoid |= {exc.port}
            continue
        break
    warnings += stop_warnings
    ctx.on_step("parsing")  # after the stop: a big trace takes a while, and the GPUs are free meanwhile
    try:
        table, busy = summarize_traces(load_trace(path) for path in files)  # one file in memory at a time
    except TraceError as exc:
        raise UserError(f"the engine wrote a trace sweeper cannot read: {exc}") from None
    return ProfileRun(table, group_shares(table), busy, files, load, warnings)


STEP_OF_STAGE = {"launch": "launching on {host}", "wait_ready": "waiting for the server to be ready",
                 "stop": "stopping the server"}


def _trial_context(ctx: ProfileContext) -> TrialContext:
    """The launch path's context: the profile folder stands in for the trial folder."""
    def on_stage(stage: str) -> None:
        if step := STEP_OF_STAGE.get(stage):
            ctx.on_step(step.format(host=ctx.host.name))

    return TrialContext(space=ctx.space, engine=ctx.engine, host=ctx.host, host_spec=ctx.host_spec,
                        trial_dir=ctx.profile_dir, reference_samples=ctx.reference_samples, on_stage=on_stage,
                        on_intent=ctx.on_intent, on_started=ctx.on_started, known_servers=ctx.known_servers, known_flags=ctx.known_flags)


def _stopped(ctx: ProfileContext, warnings: list[str], proc: ServerProcess, report: StopReport) -> None:
    if report.left_behind:  # it stays recorded, for the next profile to stop
        warnings.append(f"processes left behind after the stop: {list(report.left_behind)}")
    else:
        ctx.on_stopped(proc)


def _not_profiled(ctx: ProfileContext, failure: Failure) -> UserError:
    """Why the launch path gave no ready server, as the user reads it."""
    if failure.kind == FailureKind.UNSUPPORTED_FLAG:
        return UserError("the installed engine refuses this config: " + failure.message)
    if failure.stage == Stage.PREFLIGHT:
        return UserError(f"this config is not launched by the pipeline: {failure.stage}/{failure.kind}: "
                         f"{failure.message}")
    tail = "\n".join(failure.log_tail.splitlines()[-10:])
    return UserError(f"the server did not become ready ({failure.kind}: {failure.message}); "
                     f"log in {ctx.profile_dir / 'server.log'}; last lines:\n{tail}")


def _profile_under_load(ctx: ProfileContext, trial_ctx: TrialContext, server: LaunchedServer,
                        request: ProfileRequest, control: ProfilerControl) -> tuple[list[Path], dict[str, Any], list[str]]:
    """Output checked, warmed up, profiled under load, traces on this machine: (trace files, load, warnings)."""
    host, proc = ctx.host, server.proc
    warnings = []
    _, failure = check_server_output(trial_ctx, server)
    if failure is not None:
        warnings.append(f"output check failed ({failure.kind}): {failure.message}")
    plan = build_level_plan(ctx.space.workload, server.dialect, stall_timeout_s=server.stall_timeout_s,
                            vocab_size=served_vocab_size(ctx.host, ctx.space.model))
    c = request.concurrency
    round_s = _warm_up(ctx, server, plan, c, max(request.warmup_rounds, 1))
    folder = trace_folder(host, proc)
    ctx.on_step(f"profiling at C={c} for {request.seconds:g}s")
    call_profiler(server.base_url, control.start_path, control.build_start_body(folder), request.profiler_call_timeout_s)
    try:
        load = drive_load(server, plan, c, request.seconds, round_s)
    finally:
        if server.still_alive():  # a dead server has no profiler to stop; said below
            call_profiler(server.base_url, control.stop_path, None, request.profiler_call_timeout_s)
    if not server.still_alive():
        tail = "\n".join(host.read_log(proc, 0)[0].splitlines()[-10:])
        raise UserError(f"the server exited during the profile; log in {ctx.profile_dir / 'server.log'}; "
                        f"last lines:\n{tail}")
    if load["failed"]:
        warnings.append(f"{load['failed']} of {load['requests']} profiled requests failed")
    return _traces_here(ctx, server, folder, request), load, warnings


def _warm_up(ctx: ProfileContext, server: LaunchedServer, plan: LoadPlan, c: int, rounds: int) -> float:
    """Warmup rounds at C (a hang ends the profile); the seconds one round took."""
    ctx.on_step(f"warming up at C={c}")
    warmup = _run_closed(server, plan, build_prompts(plan, rounds * c, plan.seed + 20_000 + c), c, "warmup")
    if not any(s.ok for s in warmup.samples):
        raise UserError(f"no warmup request at C={c} succeeded: {warmup.samples[0].error if warmup.samples else ''}")
    return warmup.duration_s / rounds


def _traces_here(ctx: ProfileContext, server: LaunchedServer, folder: str, request: ProfileRequest) -> list[Path]:
    """The trace files once written, on this machine (fetched unless a local server wrote them here)."""
    host = ctx.host
    ctx.on_step("waiting for the trace files")
    remote = wait_for_traces(host, folder, request.trace_timeout_s, request.settle_s, still_alive=server.still_alive)
    local_dir = ctx.profile_dir / TRACE_SUBDIR
    if _is_local(host) and _same_folder(folder, local_dir):
        return [local_dir / f.relpath for f in remote]  # a local server wrote them in place
    ctx.on_step(f"fetching {len(remote)} trace file(s), {sum(f.size for f in remote) / 1e6:.1f} MB")
    return fetch_traces(host, folder, remote, local_dir)


def trace_folder(host: Host, proc: ServerProcess) -> str:
    """The absolute trace folder on the host: TRACE_SUBDIR of the server's working folder (where
    its log is), as the profiler env var names it relative to that folder."""
    folder = posixpath.join(posixpath.dirname(proc.log_path), TRACE_SUBDIR)
    return os.path.abspath(folder) if _is_local(host) else folder


def _is_local(host: Host) -> bool:
    return host.spec.transport == "local"


def _same_folder(remote: str, local: Path) -> bool:
    try:
        return Path(remote).resolve() == local.resolve()
    except OSError:
        return False


def relative_paths(paths: Sequence[Path], base: Path) -> list[str]:
    return [str(p.relative_to(base)) if p.is_relative_to(base) else str(p) for p in paths]
