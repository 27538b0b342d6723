"""Profile one config: relaunch it through the trial pipeline's own stages (preflight, GPU gate,
flag check, launch, wait_ready, output check), warm it up, run the engine's torch profiler while
our load generator holds C requests in flight for S seconds, fetch the traces, stop the server
(always, as run_trial does), and parse them into a kernel table."""

from __future__ import annotations

import json
import math
import os
import posixpath
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from sweeper.spec.hosts import HostSpec
from sweeper.spec.space import Space, Workload
from sweeper.trial.gate import OutputSample
from sweeper.engines.base import Engine
from sweeper.engines.flags import flag_problems
from sweeper.errors import UserError
from sweeper.hosts.base import Host, ServerProcess
from sweeper.hosts.gate import check_gpus_before_launch, wait_gpus_released
from sweeper.loadgen.client import StreamOptions, run_level
from sweeper.loadgen.vocab import DEFAULT_VOCAB_SIZE
from sweeper.loadgen.workload import build_prompt_token_ids
from sweeper.profile.control import (
    TRACE_SUBDIR, ProfilerControl, build_profiler_argv, build_profiler_env, call_profiler, profiler_for,
)
from sweeper.profile.fetch import fetch_traces, wait_for_traces
from sweeper.profile.trace import (
    DeviceBusy, GroupShare, KernelTable, TraceError, group_shares, load_trace, summarize_traces,
)
from sweeper.trial.pipeline import (
    Failure, Ready, check_output, launch, preflight, served_vocab_size, stop, wait_ready,
)

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


def drive_load(base_url: str, model: str, workload: Workload, concurrency: int, seconds: float, round_s: float,
               options: StreamOptions, vocab_size: int | None = None) -> dict[str, Any]:
    """Closed-loop load at `concurrency` for at least `seconds`: runs of whole rounds, each sized
    from the rounds before it, until the time is used (fresh prompts throughout)."""
    samples: list = []
    started = time.perf_counter()
    batch = 0
    while (elapsed := time.perf_counter() - started) < seconds and batch < 1000:
        n = profiled_request_count(concurrency, seconds - elapsed, round_s)
        seed = workload.seed + 30_000 + 1000 * batch + concurrency  # fresh prompts: no prefix-cache hits
        prompts = build_prompt_token_ids(n, workload.input_len, seed=seed, vocab_size=vocab_size or DEFAULT_VOCAB_SIZE)
        run = run_level(base_url, model, prompts, workload.output_len, concurrency, options=options)
        samples += run.samples
        round_s = run.duration_s / max(math.ceil(n / concurrency), 1)
        batch += 1
        if not any(s.ok for s in run.samples):
            break  # the server stopped answering: no point sending more
    ok = [s for s in samples if s.ok]
    return {"requests": len(samples), "completed": len(ok), "failed": len(samples) - len(ok),
            "seconds": round(time.perf_counter() - started, 3), "runs": batch,
            "output_tokens": sum(s.output_tokens for s in ok)}


def profile_config(ctx: ProfileContext, config: Mapping[str, Any], request: ProfileRequest) -> ProfileRun:
    space, host = ctx.space, ctx.host
    control = profiler_for(space.engine, ctx.engine_version)
    port_or_failure = preflight(space, config, host, ctx.host_spec.base_port)
    if isinstance(port_or_failure, Failure):
        raise UserError(f"this config is not launched by the pipeline: {port_or_failure.stage}/"
                        f"{port_or_failure.kind}: {port_or_failure.message}")
    port = port_or_failure
    spec = ctx.engine.build_launch_spec(space, config, ctx.host_spec, port, host.python())
    spec = replace(spec, env={**spec.env, **build_profiler_env(control)},
                   argv=(*spec.argv, *build_profiler_argv(control)))
    short = getattr(ctx.engine, "checks_short_flags", False)
    family = getattr(ctx.engine, "flag_family", None)
    if ctx.known_flags is not None and (problems := flag_problems(spec.argv, ctx.known_flags, short, family)):
        raise UserError("the installed engine refuses this config: " + "; ".join(problems))
    gpu_baseline = check_gpus_before_launch(host, ctx.host_spec, ctx.known_servers(), space.launch.stop_grace_s)
    if ctx.profile_dir.exists():
        shutil.rmtree(ctx.profile_dir)  # a previous profile of this trial: ours to replace
    ctx.on_step(f"launching on {host.name} (port {port})")
    proc = launch(host, spec, ctx.profile_dir)
    ctx.on_started(proc)
    try:
        files, load, warnings = _profile_under_load(ctx, proc, port, request, control)
    finally:
        ctx.on_step("stopping the server")
        report = stop(host, proc, port, space.launch.stop_grace_s)
        (ctx.profile_dir / "stop.json").write_text(json.dumps(asdict(report), indent=2))
        if not report.left_behind:
            ctx.on_stopped(proc)  # else it stays recorded, for the next profile to stop
        if gpu_baseline is not None:
            wait_gpus_released(host, ctx.host_spec, gpu_baseline, port)
    if report.left_behind:
        warnings.append(f"processes left behind after the stop: {list(report.left_behind)}")
    ctx.on_step("parsing")  # after the stop: a big trace takes a while, and the GPUs are free meanwhile
    try:
        table, busy = summarize_traces(load_trace(path) for path in files)  # one file in memory at a time
    except TraceError as exc:
        raise UserError(f"the engine wrote a trace sweeper cannot read: {exc}") from None
    return ProfileRun(table, group_shares(table), busy, files, load, warnings)


def _profile_under_load(ctx: ProfileContext, proc: ServerProcess, port: int, request: ProfileRequest,
                        control: ProfilerControl) -> tuple[list[Path], dict[str, Any], list[str]]:
    """Ready, warmed up, profiled under load, traces on this machine: (trace files, load, warnings)."""
    space, host = ctx.space, ctx.host
    base_url = host.base_url(port)
    ctx.on_step("waiting for the server to be ready")
    verdict = wait_ready(host, proc, ctx.engine.info, port, space.model, space.launch)
    if not isinstance(verdict, Ready):
        tail = "\n".join(verdict.log_tail.splitlines()[-10:])
        raise UserError(f"the server did not become ready ({verdict.kind}: {verdict.message}); "
                        f"log in {ctx.profile_dir / 'server.log'}; last lines:\n{tail}")
    warnings = []
    _, failure = check_output(base_url, space.model, space.check, ctx.reference_samples, ctx.profile_dir,
                              timeout_s=space.workload.stall_timeout_s or space.launch.stall_timeout_s)
    if failure is not None:
        warnings.append(f"output check failed ({failure.kind}): {failure.message}")
    workload = space.workload
    options = StreamOptions(timeout_s=workload.request_timeout_s, stall_timeout_s=workload.stall_timeout_s,
                            min_tokens=workload.min_tokens, continuous_usage=workload.continuous_usage_stats)
    c = request.concurrency
    ctx.on_step(f"warming up at C={c}")
    warm_rounds = max(request.warmup_rounds, 1)
    vocab = served_vocab_size(host, space.model)
    warmup = run_level(base_url, space.model, build_prompt_token_ids(warm_rounds * c, workload.input_len,
                       seed=workload.seed + 20_000 + c, vocab_size=vocab or DEFAULT_VOCAB_SIZE),
                       workload.output_len, c, options=options)
    if not any(s.ok for s in warmup.samples):
        raise UserError(f"no warmup request at C={c} succeeded: {warmup.samples[0].error if warmup.samples else ''}")
    round_s = warmup.duration_s / warm_rounds
    folder = trace_folder(host, proc)
    ctx.on_step(f"profiling at C={c} for {request.seconds:g}s")
    call_profiler(base_url, control.start_path, control.build_start_body(folder), request.profiler_call_timeout_s)
    try:
        load = drive_load(base_url, space.model, workload, c, request.seconds, round_s, options, vocab)
    finally:
        if host.is_alive(proc):  # a dead server has no profiler to stop; said below
            call_profiler(base_url, control.stop_path, None, request.profiler_call_timeout_s)
    if not host.is_alive(proc):
        tail = "\n".join(host.read_log(proc, 0)[0].splitlines()[-10:])
        raise UserError(f"the server exited during the profile; log in {ctx.profile_dir / 'server.log'}; "
                        f"last lines:\n{tail}")
    if load["failed"]:
        warnings.append(f"{load['failed']} of {load['requests']} profiled requests failed")
    ctx.on_step("waiting for the trace files")
    remote = wait_for_traces(host, folder, request.trace_timeout_s, request.settle_s,
                             still_alive=lambda: host.is_alive(proc))
    local_dir = ctx.profile_dir / TRACE_SUBDIR
    if _is_local(host) and _same_folder(folder, local_dir):
        files = [local_dir / f.relpath for f in remote]  # a local server wrote them in place
    else:
        ctx.on_step(f"fetching {len(remote)} trace file(s), {sum(f.size for f in remote) / 1e6:.1f} MB")
        files = fetch_traces(host, folder, remote, local_dir)
    return files, load, warnings


def trace_folder(host: Host, proc: ServerProcess) -> str:
    """The absolute trace folder on the host: TRACE_SUBDIR of the server's working folder (where
    its log is), as the profiler env var names it relative to that folder."""
    folder = posixpath.join(posixpath.dirname(proc.log_path), TRACE_SUBDIR)
    return os.path.abspath(folder) if _is_local(host) else folder


def _is_local(host: Host) -> bool:
    return getattr(getattr(host, "spec", None), "transport", "") == "local"


def _same_folder(remote: str, local: Path) -> bool:
    try:
        return Path(remote).resolve() == local.resolve()
    except OSError:
        return False


def relative_paths(paths: Sequence[Path], base: Path) -> list[str]:
    return [str(p.relative_to(base)) if p.is_relative_to(base) else str(p) for p in paths]
