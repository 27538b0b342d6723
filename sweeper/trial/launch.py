"""The one launch path: preflight -> flag check -> GPU gate -> launch -> wait_ready, then always
the stop and the GPU release. `launched_server` owns all of it, for a trial (pipeline.run_trial)
and for a profile (profile/run.py) alike, and yields the ready server: where to send requests, the
name they carry, the engine's request dialect and the watchdog's stall timeout.

A config-caused failure is written into the caller's TrialOutcome (with each stage's seconds);
only infrastructure faults raise (InfraError). A port found taken, the HTTP port or one of the
engine's internal ones, is one (PortClash): the server is stopped and the trial retried on
another port, the config never marked infeasible for it.
"""

from __future__ import annotations

import json
import logging
import shlex
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from sweeper.engines.adapter import EngineInfo, LaunchSpec, classify_log, config_gpus, gpus_beyond_host
from sweeper.engines.flags import flag_problems
from sweeper.errors import InfraError, PortClash
from sweeper.hosts.agent import write_whole
from sweeper.hosts.base import Host, LaunchIntent, ServerProcess, StopReport
from sweeper.hosts.gpu_gate import check_gpus_before_launch, wait_gpus_released
from sweeper.hosts.gpu import GpuSnapshot, gpus_needed
from sweeper.loadgen.oneshot import LoadgenError, complete, get_status
from sweeper.loadgen.endpoints import RequestDialect
from sweeper.outcomes import FailureKind, Stage
from sweeper.redact import redact_argv, redact_env, redacted_command_line
from sweeper.spec.rules import excluded_by_rule, violated_constraints
from sweeper.spec.space import Launch, Space
from sweeper.trial.context import Failure, TrialContext, TrialOutcome

LOG_TAIL_LINES = 40
CANDIDATE_PORTS, PORT_STEP = 2000, 10  # base ports tried from the host's base_port, spaced apart
SLOW_READY_LOG_S = 60.0  # a server not ready after this long has its log tail logged (--verbose)

log = logging.getLogger(__name__)
# The engine's newest log line while its server starts, for the heartbeat of a piped run
# (cli/progress.py LineEvents): a logger of its own, kept off the --verbose lines.
engine_lines = logging.getLogger("sweeper.engine_log")
engine_lines.propagate = False


@dataclass(frozen=True)
class LaunchedServer:
    """A server launched_server started and found ready."""

    host: Host
    proc: ServerProcess
    port: int
    base_url: str
    model: str  # the name every request carries (the engine's served_model)
    dialect: RequestDialect  # what the engine's HTTP API accepts
    stall_timeout_s: float  # the watchdog: no byte for this long while the server lives is a hang
    argv: tuple[str, ...] = ()  # as launched
    gpu_indices: tuple[int, ...] | None = None  # the GPUs the trial may use (None: the GPU gate is off)

    def still_alive(self) -> bool:
        return self.host.is_alive(self.proc)


def stall_timeout_of(space: Space) -> float:
    """The watchdog's stall timeout: the workload's, else the launch's."""
    return space.workload.stall_timeout_s or space.launch.stall_timeout_s


@contextmanager
def launched_server(ctx: TrialContext, config: Mapping[str, Any], outcome: TrialOutcome,
                    extra_env: Mapping[str, str] | None = None, extra_argv: Sequence[str] = (),
                    on_stopped: Callable[[ServerProcess, StopReport], None] = lambda proc, report: None,
                    ) -> Iterator[LaunchedServer | None]:
    """The ready server, or None when the config failed before it was ready (outcome.failure
    says where and why). Whatever the block does (an exception, Ctrl-C), a launched server is
    stopped, its stop recorded (stop.json) and its GPUs waited for (gpu_memory.json)."""
    timer = partial(timed_stage, outcome, ctx.on_stage)
    started = _start_checked(ctx, config, outcome, timer, extra_env or {}, tuple(extra_argv))
    if started is None:
        yield None
        return
    proc, port, gpu_baseline, argv = started
    gpus = None if gpu_baseline is None else tuple(
        gpus_needed(ctx.host_spec.gpus, gpu_baseline, ctx.host_spec.env.get("CUDA_VISIBLE_DEVICES")))
    try:
        yield _ready_or_none(ctx, outcome, timer, proc, port, argv, gpus)
    finally:
        _stop_and_release(ctx, outcome, timer, proc, port, gpu_baseline, on_stopped)
    if outcome.failure is not None:
        log_failure_tail(ctx, proc, outcome.failure)
    if outcome.failure is not None and outcome.failure.kind == FailureKind.PORT_BUSY:
        raise port_clash(ctx.host.name, port, outcome.failure)


def log_failure_tail(ctx: TrialContext, proc: ServerProcess, failure: Failure) -> None:
    """--verbose: the failed stage with the end of the engine's log (read only when it is shown)."""
    if not log.isEnabledFor(logging.INFO):
        return
    tail = failure.log_tail or read_log_tail(ctx.host, proc)
    log.info("trial %s on %s: %s failed (%s): %s; %s ends:\n%s", ctx.trial_dir.name, ctx.host.name, failure.stage,
             failure.kind, failure.message, proc.log_path, indent_lines(tail))


def read_log_tail(host: Host, proc: ServerProcess, lines: int = LOG_TAIL_LINES) -> str:
    watch = LogWatch(host, proc)
    while watch.poll():
        pass
    return watch.tail(lines)


def indent_lines(text: str) -> str:
    return "\n".join(f"    | {line}" for line in text.splitlines()) or "    | (empty)"


def port_clash(host_name: str, port: int, failure: Failure) -> PortClash:
    """The infrastructure fault a port_busy start-up is, naming the engine's own line."""
    lines = [line.strip() for line in failure.log_tail.splitlines() if line.strip()]
    said = next((line for line in reversed(lines) if "in use" in line or "EADDRINUSE" in line),
                lines[-1] if lines else "")
    return PortClash(f"host {host_name!r}: a port of the server launched on --port {port} was taken "
                     f"({failure.message}{': ' + said if said else ''}); retried on another port", port)


def _start_checked(ctx: TrialContext, config: Mapping[str, Any], outcome: TrialOutcome, timer: Callable,
                   extra_env: Mapping[str, str], extra_argv: tuple[str, ...] = (),
                   ) -> tuple[ServerProcess, int, GpuSnapshot | None, tuple[str, ...]] | None:
    """Preflight, GPU gate, flag check, launch: the process, its port, the GPUs' baseline and its
    argv, or None with the failure in the outcome."""
    space = ctx.space
    python = ctx.host.python()

    def spec_at(port: int) -> LaunchSpec:
        spec = ctx.engine.build_launch_spec(space, config, ctx.host_spec, port, python)
        if extra_env or extra_argv:  # e.g. what switches the profiler on
            spec = LaunchSpec(argv=(*spec.argv, *extra_argv), env={**spec.env, **extra_env}, port=spec.port)
        return spec

    with timer("preflight"):
        needed = config_gpus(space, ctx.engine.info, config, spec_at(ctx.host_spec.base_port).argv)
        port_or_failure = preflight(space, config, ctx.host, ctx.host_spec.base_port,
                                    lambda port: ctx.engine.bound_ports(spec_at(port)), ctx.avoid_ports,
                                    needs_gpus=needed, host_gpus=ctx.host_spec.declared_gpus)
        gpu_baseline = None if isinstance(port_or_failure, Failure) else check_gpus_before_launch(
            ctx.host, ctx.host_spec, ctx.known_servers(), space.launch.stop_grace_s)
    if isinstance(port_or_failure, Failure):
        outcome.failure = port_or_failure
        return None
    port = port_or_failure
    spec = spec_at(port)
    if ctx.known_flags is not None and (problems := flag_problems(
            spec.argv, ctx.known_flags, ctx.engine.checks_short_flags, ctx.engine.flag_family)):
        outcome.failure = Failure(Stage.PREFLIGHT, FailureKind.UNSUPPORTED_FLAG, "; ".join(problems))
        return None
    ctx.host.take_disruption()  # only a connection drop during this launch makes it an infra fault
    with timer("launch"):
        proc = launch(ctx.host, spec, ctx.trial_dir, ctx.on_intent)
        outcome.launched = True
        ctx.on_started(proc)
    return proc, port, gpu_baseline, tuple(spec.argv)


def _ready_or_none(ctx: TrialContext, outcome: TrialOutcome, timer: Callable, proc: ServerProcess,
                   port: int, argv: tuple[str, ...], gpu_indices: tuple[int, ...] | None) -> LaunchedServer | None:
    info = ctx.engine.info
    model = ctx.engine.served_model(ctx.space)
    with timer("wait_ready"):
        verdict = wait_ready(ctx.host, proc, info, port, model, ctx.space.launch)
    if not isinstance(verdict, Ready):
        outcome.failure = Failure(Stage.WAIT_READY, verdict.kind, verdict.message, verdict.log_tail)
        return None
    return LaunchedServer(ctx.host, proc, port, ctx.host.base_url(port), model, info.dialect,
                          stall_timeout_of(ctx.space), argv, gpu_indices)


def _stop_and_release(ctx: TrialContext, outcome: TrialOutcome, timer: Callable, proc: ServerProcess, port: int,
                      gpu_baseline: GpuSnapshot | None, on_stopped: Callable[[ServerProcess, StopReport], None]) -> None:
    host, trial_dir = ctx.host, ctx.trial_dir
    serving, started = None, time.monotonic()
    try:
        # What a live server holds; after a crash it says nothing and would delay the record.
        serving = _snapshot_or_none(host) if gpu_baseline is not None and host.is_alive(proc) else None
        ctx.on_stage("stop")  # into the study, which another process may hold locked: a Ctrl-C
        # raised when that write ends must still stop the server (issue 32)
    finally:
        report = stop(host, proc, port, ctx.space.launch.stop_grace_s)
        outcome.stage_seconds["stop"] = round(time.monotonic() - started, 3)
    (trial_dir / "stop.json").write_text(json.dumps(asdict(report), indent=2))
    if report.left_behind and outcome.failure is None:
        outcome.failure = Failure(Stage.STOP, FailureKind.STOP_FAILED, f"processes left behind: {report.left_behind}")
    on_stopped(proc, report)
    if gpu_baseline is not None:
        with timer("gpu_release"):
            released = wait_gpus_released(host, ctx.host_spec, gpu_baseline, proc, port)
        outcome.gpu_memory = build_gpu_memory_record(gpu_baseline, serving, released)
        (trial_dir / "gpu_memory.json").write_text(json.dumps(outcome.gpu_memory, indent=2))


# ---------------------------------------------------------------- the stages

def preflight(space: Space, config: Mapping[str, Any], host: Host, base_port: int,
              ports_at: Callable[[int], Mapping[int, str]] = lambda port: {port: "--port"},
              avoid: frozenset[int] = frozenset(),
              needs_gpus: int | None = None, host_gpus: int | None = None) -> Failure | int:
    """A base port at which every port the server will bind (`ports_at`: the engine's bound_ports
    for the config launched there) is free on the host, or the failure that means no launch is
    needed. `avoid`: base ports a clash was seen on (a retried trial's). `needs_gpus`, `host_gpus`:
    the GPUs the config needs and the host has (None: not known; config_gpus, declared_gpus)."""
    if reason := excluded_by_rule(space, config):
        return Failure(Stage.PREFLIGHT, FailureKind.RULE, reason)
    broken = violated_constraints(space, config)
    if broken:
        return Failure(Stage.PREFLIGHT, FailureKind.CONSTRAINT, "violates: " + "; ".join(broken))
    if too_many := gpus_beyond_host(needs_gpus, host.name, host_gpus):
        return Failure(Stage.PREFLIGHT, FailureKind.TOO_MANY_GPUS, too_many)
    return free_base_port(host, base_port, ports_at, avoid)


def free_base_port(host: Host, base_port: int, ports_at: Callable[[int], Mapping[int, str]],
                   avoid: frozenset[int] = frozenset()) -> int:
    """The first candidate base port whose ports are all free; an InfraError when a port the
    config pins (the same at every base port, e.g. --nccl-port) is taken, or none is free."""
    moved = [ports_at(base_port + shift) for shift in (1, 1000)]  # a derived port moves with the base
    pinned = {p: what for p, what in ports_at(base_port).items() if all(p in other for other in moved)}
    if taken := [f"{p} ({what})" for p, what in pinned.items() if not host.port_is_free(p)]:
        raise InfraError(f"host {host.name!r}: port {', '.join(taken)} is in use, and the config pins it")
    for port in range(base_port, base_port + CANDIDATE_PORTS, PORT_STEP):  # spaced: engines derive ports
        if port in avoid:
            continue
        wanted = ports_at(port)
        if all(host.port_is_free(p) for p in wanted if p not in pinned):
            log.debug("host %s: base port %d, ports free: %s", host.name, port,
                      ", ".join(f"{p} ({what})" for p, what in wanted.items()))
            return port
    raise InfraError(f"no base port in {base_port}..{base_port + CANDIDATE_PORTS} on {host.name} "
                     "with all the server's ports free")


def write_launch_files(trial_dir: Path, spec: LaunchSpec) -> None:
    """The command as a runnable script, its argv and the environment, secrets redacted (the value
    of a secret-looking variable or flag); the server itself is launched with `spec` untouched."""
    trial_dir.mkdir(parents=True, exist_ok=True)
    env = redact_env(spec.env)
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items()))
    (trial_dir / "command.sh").write_text(
        "#!/usr/bin/env bash\n# written by sweeper; secrets are redacted\n"
        + exports + "exec " + redacted_command_line(spec.argv) + "\n")
    (trial_dir / "env.json").write_text(json.dumps(env, indent=2, sort_keys=True))
    (trial_dir / "argv.json").write_text(json.dumps(redact_argv(spec.argv), indent=2))


def launch(host: Host, spec: LaunchSpec, trial_dir: Path,
           on_intent: Callable[[LaunchIntent], None] = lambda intent: None) -> ServerProcess:
    """Intent before action: `on_intent` records the run token and run folder (in the study)
    before anything is spawned, so a controller killed at any moment after leaves a server that
    the next one finds by its token (recovery.stop_leftover_servers)."""
    write_launch_files(trial_dir, spec)
    token = uuid.uuid4().hex
    on_intent(host.launch_intent(str(trial_dir), token))
    proc = host.start_detached(spec.argv, spec.env, cwd=str(trial_dir),
                               log_path=str(trial_dir / "server.log"), token=token)
    write_whole(trial_dir / "process.json", json.dumps(proc.to_dict(), indent=2))
    return proc


@dataclass(frozen=True)
class Ready:
    seconds: float


@dataclass(frozen=True)
class Crashed:
    kind: FailureKind
    message: str
    log_tail: str


@dataclass(frozen=True)
class TimedOut:
    kind: FailureKind  # timeout | hang
    message: str
    log_tail: str


class LogWatch:
    """Follows a server log by offset; remembers its tail and when it last grew."""

    def __init__(self, host: Host, proc: ServerProcess):
        self.host, self.proc = host, proc
        self.offset, self.text, self.last_growth = 0, "", time.monotonic()

    def poll(self) -> str:
        new, self.offset = self.host.read_log(self.proc, self.offset)
        if new:
            self.text = (self.text + new)[-200_000:]
            self.last_growth = time.monotonic()
        return new

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return "\n".join(self.text.splitlines()[-lines:])


def wait_ready(host: Host, proc: ServerProcess, info: EngineInfo, port: int, model: str,
               launch_cfg: Launch) -> Ready | Crashed | TimedOut:
    """Poll until a real generation succeeds, the server dies or shows a failure line, it stalls,
    or the deadline passes. Liveness and the log are checked on every poll."""
    started = time.monotonic()
    deadline = started + launch_cfg.ready_timeout_s
    watch = LogWatch(host, proc)
    base_url = host.base_url(port)
    slow_every = min(SLOW_READY_LOG_S, launch_cfg.ready_timeout_s / 4)
    next_slow_note = started + slow_every
    while True:
        if watch.poll() and engine_lines.isEnabledFor(logging.INFO) and (lines := watch.text.rstrip().splitlines()):
            engine_lines.info(lines[-1])
        if crashed := _crashed(host, proc, info, watch):
            return crashed
        health = get_status(base_url + info.readiness.health_path)
        if health is not None and not host.listens_on(proc, port):
            # Our server may have answered and be dying (its socket gone, its exit or failure line
            # a moment behind: llama-server answers 503 while loading, then died of a huge context's
            # allocation and read as PORT_BUSY): a second look a poll later, then its crash. What
            # answers again from a socket not ours holds the port: never measure it.
            time.sleep(launch_cfg.poll_interval_s)
            if crashed := _crashed(host, proc, info, watch):
                return crashed
            if get_status(base_url + info.readiness.health_path) is not None and not host.listens_on(proc, port):
                return Crashed(FailureKind.PORT_BUSY, f"port {port} is answered by a process that is not this server",
                               watch.tail())
            continue
        if health == 200 and _generates(base_url, model, info):
            return Ready(time.monotonic() - started)
        now = time.monotonic()
        if health is None and now - watch.last_growth > launch_cfg.stall_timeout_s:
            return TimedOut(FailureKind.HANG, f"no new log line for {launch_cfg.stall_timeout_s:.0f}s and the port is closed",
                            watch.tail())
        if now >= deadline:
            return TimedOut(FailureKind.TIMEOUT, f"not ready after {launch_cfg.ready_timeout_s:.0f}s", watch.tail())
        if now >= next_slow_note:  # --verbose: what a slow start-up is doing
            log.info("%s: server on port %d not ready after %.0fs (of %.0fs); %s ends:\n%s", host.name, port,
                     now - started, launch_cfg.ready_timeout_s, proc.log_path, indent_lines(watch.tail(10)))
            next_slow_note = now + slow_every
        time.sleep(launch_cfg.poll_interval_s)


def _crashed(host: Host, proc: ServerProcess, info: EngineInfo, watch: LogWatch) -> Crashed | None:
    """A failure line in the log, or the server's exit during start-up; None while it lives."""
    if signature := classify_log(watch.text, info.signatures):
        return Crashed(signature.kind, f"log shows {signature.substring!r}", watch.tail())
    if host.is_alive(proc):
        return None
    watch.poll()
    signature = classify_log(watch.text, info.signatures)
    return Crashed(signature.kind if signature else FailureKind.CRASH, "server exited during start-up", watch.tail())


def _generates(base_url: str, model: str, info: EngineInfo) -> bool:
    try:
        complete(base_url, model, "Hello", max_tokens=1, timeout_s=30.0, api=info.dialect.api)
        return True
    except LoadgenError:
        return False  # healthy but cannot generate yet: keep polling until the deadline


def stop(host: Host, proc: ServerProcess, port: int, grace_s: float) -> StopReport:
    """SIGTERM the group, wait, SIGKILL; then wait (up to 10 s) until none of its processes listens
    on `port`. Only its own: a port_busy start-up's holder stays, and so may a server that took the
    port once ours let it go (waiting on either added 10 s to a trial)."""
    report = host.stop_group(proc, grace_s)
    deadline = time.monotonic() + 10
    while host.listens_on(proc, port) and time.monotonic() < deadline:
        time.sleep(0.1)
    return report


def build_gpu_memory_record(before: GpuSnapshot, serving: GpuSnapshot | None,
                            after: GpuSnapshot | None) -> dict[str, dict[str, int]]:
    """MiB used per GPU index (as strings: JSON keys) at each point; a point not read is absent."""
    record = {"before": _used_by_gpu(before)}
    if serving is not None:
        record["serving"] = _used_by_gpu(serving)
    if after is not None:
        record["after"] = _used_by_gpu(after)
    return record


def _used_by_gpu(snapshot: GpuSnapshot) -> dict[str, int]:
    return {str(g.index): g.used_mib for g in snapshot.gpus}


def _snapshot_or_none(host: Host) -> GpuSnapshot | None:
    """What the server holds at the end of its trial; informative, so a failed read is no failure."""
    try:
        return host.gpu_snapshot()
    except Exception:  # noqa: BLE001 - the release check after the stop reads it again and decides
        return None


@contextmanager
def timed_stage(outcome: TrialOutcome, on_stage: Callable[[str], None], name: str) -> Iterator[None]:
    """Tells on_stage the stage began; its seconds go into outcome.stage_seconds however it ends."""
    on_stage(name)
    started = time.monotonic()
    try:
        yield
    finally:
        outcome.stage_seconds[name] = round(time.monotonic() - started, 3)
