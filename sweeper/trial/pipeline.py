"""One trial: preflight -> launch -> wait_ready -> check_output -> load ladder -> stop.

Each stage is a small function that takes what it needs and returns a value; `run_trial` strings
them together and always stops what it launched. A config-caused failure comes back as data
(a Failure in the outcome); only infrastructure faults raise (InfraError).
"""

from __future__ import annotations

import json
import posixpath
import shlex
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence


from sweeper.spec.hosts import HostSpec
from sweeper.spec.space import Launch, OutputCheck, Space, Workload
from sweeper.trial.gate import GateError, GateTimeout, OutputSample, collect_samples, judge, write_check_file
from sweeper.engines.base import Engine, EngineInfo, LaunchSpec, classify_log, first_stall_line
from sweeper.engines.flags import flag_problems
from sweeper.errors import InfraError
from sweeper.hosts.base import Host, ServerProcess, StopReport
from sweeper.hosts.gate import check_gpus_before_launch, wait_gpus_released
from sweeper.hosts.gpu import GpuSnapshot
from sweeper.loadgen.client import (STALLED, LevelRun, LoadgenError, StreamOptions, complete, fit_to_dialect,
                                    get_status, is_stalled)
from sweeper.loadgen.endpoints import RequestDialect
from sweeper.loadgen.metrics import combine_repeats, summarize_level
from sweeper.loadgen.onhost import LoadPlace, controller_runner, load_place
from sweeper.loadgen.native import parse_vllm_result
from sweeper.loadgen.vocab import DEFAULT_VOCAB_SIZE, model_vocab_size
from sweeper.loadgen.workload import build_prompt_texts, build_prompt_token_ids
from sweeper.redact import redact_env
from sweeper.spec.rules import excluded_by_rule, violated_constraints

LOG_TAIL_LINES = 40
BAD_OUTPUT = "bad_output"  # the failure kind of a config whose greedy outputs fail the gate


@dataclass(frozen=True)
class Failure:
    stage: str  # preflight | launch | wait_ready | check_output | load | stop
    kind: str  # constraint | crash | oom | cuda_graph_capture | bad_output | timeout | hang | ...
    message: str
    log_tail: str = ""


@dataclass
class TrialOutcome:
    config: dict[str, Any]
    failure: Failure | None = None
    levels: dict[int, dict] = field(default_factory=dict)
    output_text: str | None = None  # the first check prompt's greedy answer
    output_samples: list[dict] | None = None  # every check prompt's answer (correctness.OutputSample)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    launched: bool = False
    # MiB used per GPU index before the launch, at the end of the load, and once released
    gpu_memory: dict[str, dict[str, int]] | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None


@dataclass(frozen=True)
class TrialContext:
    space: Space
    engine: Engine
    host: Host
    host_spec: HostSpec
    trial_dir: Path
    reference_text: str | None = None  # unused since the correctness gate; kept for old callers
    reference_samples: Sequence[OutputSample] | None = None  # the study's reference outputs
    on_stage: Callable[[str], None] = lambda stage: None
    on_started: Callable[[ServerProcess], None] = lambda proc: None
    # Judges each measured level; a Failure returned stops the ladder (SLO broken, abandoned).
    on_level: Callable[[int, dict], "Failure | None"] = lambda level, metrics: None
    known_servers: Callable[[], list[ServerProcess]] = lambda: []
    known_flags: Mapping[str, list[str] | None] | None = None  # the installed engine's --help  # this study's, for the GPU gate


# ---------------------------------------------------------------- verdicts of wait_ready

@dataclass(frozen=True)
class Ready:
    seconds: float


@dataclass(frozen=True)
class Crashed:
    kind: str
    message: str
    log_tail: str


@dataclass(frozen=True)
class TimedOut:
    kind: str  # timeout | hang
    message: str
    log_tail: str


# ---------------------------------------------------------------- stages

def preflight(space: Space, config: Mapping[str, Any], host: Host, base_port: int) -> Failure | int:
    """A free port for the server, or the failure that means no launch is needed."""
    if reason := excluded_by_rule(space, config):
        return Failure("preflight", "rule", reason)
    broken = violated_constraints(space, config)
    if broken:
        return Failure("preflight", "constraint", "violates: " + "; ".join(broken))
    for port in range(base_port, base_port + 2000, 10):  # spaced: engines derive ports from --port
        if host.port_is_free(port):
            return port
    raise InfraError(f"no free port in {base_port}..{base_port + 2000} on {host.name}")


def write_launch_files(trial_dir: Path, spec: LaunchSpec) -> None:
    """The exact command as a runnable script and the environment (secrets redacted)."""
    trial_dir.mkdir(parents=True, exist_ok=True)
    env = redact_env(spec.env)
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items()))
    (trial_dir / "command.sh").write_text(
        "#!/usr/bin/env bash\n# written by sweeper; secrets are redacted\n"
        + exports + "exec " + shlex.join(spec.argv) + "\n")
    (trial_dir / "env.json").write_text(json.dumps(env, indent=2, sort_keys=True))
    (trial_dir / "argv.json").write_text(json.dumps(list(spec.argv), indent=2))


def launch(host: Host, spec: LaunchSpec, trial_dir: Path) -> ServerProcess:
    write_launch_files(trial_dir, spec)
    proc = host.start_detached(spec.argv, spec.env, cwd=str(trial_dir),
                               log_path=str(trial_dir / "server.log"), token=uuid.uuid4().hex)
    (trial_dir / "process.json").write_text(json.dumps(proc.to_dict(), indent=2))
    return proc


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


def native_level_runner(host: Host, engine: Engine, proc: ServerProcess, base_url: str, model: str,
                        workload: Workload) -> Callable[[int], dict]:
    """One level measured by the engine's own benchmark on the host: a warm-up run (discarded),
    then the measured run, its JSON (written beside the server's log) read into a level record."""
    folder = posixpath.dirname(proc.log_path)

    def run(concurrency: int, requests: int, tag: str) -> dict:
        result_file = posixpath.join(folder, f"native_c{concurrency}{tag}.json")
        argv = engine.native_bench_argv(host.python(), base_url, model, workload.input_len, workload.output_len,
                                        requests, concurrency, workload.seed + concurrency, result_file)
        if argv is None:
            return _native_invalid(concurrency, f"{engine.info.name} has no native benchmark (workload.load: native)")
        done = host.run(argv, timeout_s=workload.request_timeout_s + 600)
        text = host.run(["cat", result_file], timeout_s=60)
        if done.returncode != 0 or text.returncode != 0:
            return _native_invalid(concurrency, f"the engine's benchmark failed: {done.describe()[-300:]}")
        return parse_vllm_result(text.stdout)

    def level(concurrency: int) -> dict:
        if workload.warmup_rounds:
            run(concurrency, workload.warmup_rounds * concurrency, ".warmup")
        record = run(concurrency, workload.requests_at(concurrency), "")
        return {**record, "max_concurrent_requests": concurrency, "load_from": "native"}
    return level


def _native_invalid(concurrency: int, reason: str) -> dict:
    return {"completed": 0, "failed": 0, "output_throughput": float("nan"), "max_concurrency": concurrency,
            "valid": False, "invalid_reasons": [reason]}


def stall_watch(host: Host, proc: ServerProcess, stall_lines: Sequence[str]) -> Callable[[], str | None]:
    """new_stall for run_ladder: the log read on from here (start-up lines skipped)."""
    if not stall_lines:
        return lambda: None
    watch = LogWatch(host, proc)
    watch.poll()
    return lambda: first_stall_line(watch.poll(), stall_lines)


def wait_ready(host: Host, proc: ServerProcess, info: EngineInfo, port: int, model: str,
               launch_cfg: Launch) -> Ready | Crashed | TimedOut:
    """Poll until a real generation succeeds, the server dies or shows a failure line, it stalls,
    or the deadline passes. Liveness and the log are checked on every poll."""
    started = time.monotonic()
    deadline = started + launch_cfg.ready_timeout_s
    watch = LogWatch(host, proc)
    base_url = host.base_url(port)
    while True:
        watch.poll()
        if signature := classify_log(watch.text, info.signatures):
            return Crashed(signature.kind, f"log shows {signature.substring!r}", watch.tail())
        if not host.is_alive(proc):
            watch.poll()
            signature = classify_log(watch.text, info.signatures)
            kind = signature.kind if signature else "crash"
            return Crashed(kind, "server exited during start-up", watch.tail())
        health = get_status(base_url + info.readiness.health_path)
        if health is not None and not host.listens_on(proc, port):
            # Something else holds the port: never measure a server that is not ours.
            return Crashed("port_busy", f"port {port} is answered by a process that is not this server",
                           watch.tail())
        if health == 200:
            try:
                complete(base_url, model, "Hello", max_tokens=1, timeout_s=30.0, api=info.dialect.api)
                return Ready(time.monotonic() - started)
            except LoadgenError:
                pass  # healthy but cannot generate yet: keep polling until the deadline
        now = time.monotonic()
        if health is None and now - watch.last_growth > launch_cfg.stall_timeout_s:
            return TimedOut("hang", f"no new log line for {launch_cfg.stall_timeout_s:.0f}s and the port is closed",
                            watch.tail())
        if now >= deadline:
            return TimedOut("timeout", f"not ready after {launch_cfg.ready_timeout_s:.0f}s", watch.tail())
        time.sleep(launch_cfg.poll_interval_s)


def check_output(base_url: str, model: str, check: OutputCheck, reference: Sequence[OutputSample] | None,
                 trial_dir: Path, timeout_s: float = 120.0,
                 dialect: RequestDialect = RequestDialect()) -> tuple[list[OutputSample], Failure | None]:
    """Greedy completions of the check's prompt set, judged against the study's reference when it
    has one, else by the garbage detector (so a garbage first trial can neither win nor set the
    reference). The samples and the verdict are saved in the trial folder either way. A request
    unanswered within `timeout_s` is a hang (the server was ready a moment ago)."""
    try:
        samples = collect_samples(base_url, model, check, timeout_s, dialect)
    except GateError as exc:
        write_check_file(trial_dir, [], None, error=str(exc))
        kind = "hang" if isinstance(exc, GateTimeout) else "generation_error"
        return [], Failure("check_output", kind, str(exc))
    if check.mode == "none" or (check.mode == "reference-only" and reference is None):
        write_check_file(trial_dir, samples, None)
        return samples, None  # a generation succeeded: all this mode asks
    verdict = judge(samples, reference, check)
    write_check_file(trial_dir, samples, verdict)
    if verdict.passed:
        return samples, None
    return samples, Failure("check_output", BAD_OUTPUT,
                            f"{'; '.join(verdict.reasons)} (compared with the {verdict.compared_with}; "
                            "samples in output_check.json)")


def build_stream_options(workload: Workload, dialect: RequestDialect,
                         stall_timeout_s: float | None = None) -> StreamOptions:
    """How load requests are sent: the workload's wishes, limited to what the server accepts."""
    wished = StreamOptions(timeout_s=workload.request_timeout_s,
                           stall_timeout_s=workload.stall_timeout_s or stall_timeout_s,
                           min_tokens=workload.min_tokens, continuous_usage=workload.continuous_usage_stats)
    return fit_to_dialect(wished, dialect)


def build_level_prompts(n: int, input_len: int, seed: int, dialect: RequestDialect,
                        vocab_size: int | None = None) -> list[list[int]] | list[str]:
    """Token ids where the server takes them (exact input length, below the served model's
    vocabulary size), else text of about input_len tokens."""
    if dialect.text_prompts or dialect.api == "chat":
        return build_prompt_texts(n, input_len, seed)
    return build_prompt_token_ids(n, input_len, seed, vocab_size or DEFAULT_VOCAB_SIZE)


def served_vocab_size(host: Host, model: str) -> int | None:
    """The model folder's vocabulary size as the host sees it (config.json, tokenizer.json), or
    None where `model` is no folder there (a hub name: the load keeps its default ids)."""
    def read(path: str) -> str | None:
        result = host.run(["cat", path], timeout_s=60)
        return result.stdout if result.returncode == 0 else None
    return model_vocab_size(read, model)


def run_ladder(base_url: str, model: str, workload: Workload, time_scale: float, trial_dir: Path,
               on_level: Callable[[int, dict], Failure | None], still_alive: Callable[[], bool],
               dialect: RequestDialect = RequestDialect(), place: LoadPlace | None = None,
               stall_timeout_s: float | None = None,
               vocab_size: int | None = None,
               new_stall: Callable[[], str | None] = lambda: None,
               native_level: Callable[[int], dict] | None = None) -> tuple[dict[int, dict], Failure | None]:
    """Each level: a warmup (not measured), then `repeats` runs with exactly C requests in flight
    until their requests run out; the median repeat is kept, with the repeats' CV. `place` says
    where the client runs (loadgen/onhost.py); by default here, against base_url.
    Watchdog: a request that gets no byte for the stall timeout (workload.stall_timeout_s, else
    `stall_timeout_s`) while the server lives is a hang (an NCCL collective stuck mid-load): the
    level stops sending and the trial ends with kind `hang` instead of waiting forever.
    `new_stall()` gives the first stall line the server logged since it was last asked (a JIT
    compile: EngineInfo.stall_lines): one during the warm-up is what the warm-up is for, one
    during a measured run makes that level invalid."""
    place = place or LoadPlace("controller", controller_runner(base_url, model))
    levels: dict[int, dict] = {}
    if native_level is not None:  # workload.load: native, the engine's own benchmark per level
        for concurrency in workload.concurrency:
            levels[concurrency] = metrics = native_level(concurrency)
            if not still_alive():
                return levels, Failure("load", "crash_under_load", f"server died at concurrency {concurrency}")
            if verdict := on_level(concurrency, metrics):
                return levels, verdict
        return levels, None
    samples_dir = trial_dir / "samples"
    samples_dir.mkdir(parents=True, exist_ok=True)
    options = build_stream_options(workload, dialect, stall_timeout_s)
    for concurrency in workload.concurrency:
        warmup = build_level_prompts(workload.warmup_rounds * concurrency, workload.input_len,
                                     workload.seed + 10_000 + concurrency, dialect, vocab_size)
        crashed = Failure("load", "crash_under_load", f"server died at concurrency {concurrency}")
        # After a run with failed requests, a dead server ends the ladder at once: each further
        # run would only fail too (and, loading from the host, start a python there first).
        if warmup:
            warm = place.run(warmup, workload.output_len, concurrency, options)
            new_stall()
            if hang := _hang_of(warm.samples, concurrency, "warmup", still_alive):
                return levels, hang
            if _any_failed(warm) and not still_alive():
                return levels, crashed
        repeats, dead = [], False
        for repeat in range(workload.repeats):  # fresh prompts each repeat: no prefix-cache hits
            prompts = build_level_prompts(workload.requests_at(concurrency), workload.input_len,
                                          workload.seed + concurrency + 100_000 * repeat, dialect, vocab_size)
            run = place.run(prompts, workload.output_len, concurrency, options)
            suffix = "" if repeat == 0 else f".r{repeat + 1}"  # c<C>.json stays the first repeat
            (samples_dir / f"c{concurrency}{suffix}.json").write_text(json.dumps([asdict(s) for s in run.samples]))
            if hang := _hang_of(run.samples, concurrency, "measured run", still_alive):
                return levels, hang
            summary = summarize_level(run.samples, concurrency, run.duration_s, time_scale=time_scale,
                                      requested_output_len=workload.output_len, lag=run.lag,
                                      slo_ttft_ms=workload.slo_ttft_ms, slo_tpot_ms=workload.slo_tpot_ms,
                                      max_client_lag_ms=workload.max_client_lag_ms)
            if stall := new_stall():
                summary["invalid_reasons"] = [*summary["invalid_reasons"],
                                              f"the server stalled on a compile during the measured run: {stall[-200:]}"]
                summary["valid"] = False
            repeats.append(summary)
            if _any_failed(run) and not still_alive():
                dead = True
                break
        metrics = combine_repeats(repeats)
        metrics["load_from"] = place.where
        levels[concurrency] = metrics
        if dead or not still_alive():
            return levels, crashed
        if verdict := on_level(concurrency, metrics):
            return levels, verdict
    return levels, None


def _any_failed(run: LevelRun) -> bool:
    return not all(sample.ok for sample in run.samples)


def _hang_of(samples: Sequence, concurrency: int, what: str, still_alive: Callable[[], bool]) -> Failure | None:
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


def stop(host: Host, proc: ServerProcess, port: int, grace_s: float) -> StopReport:
    """SIGTERM the group, wait, SIGKILL; then confirm the port is free."""
    report = host.stop_group(proc, grace_s)
    deadline = time.monotonic() + 10
    while not host.port_is_free(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    return report


# ---------------------------------------------------------------- the pipeline

def run_trial(ctx: TrialContext, config: Mapping[str, Any]) -> TrialOutcome:
    outcome = TrialOutcome(config=dict(config))
    timer = partial(_stage, outcome, ctx.on_stage)
    space = ctx.space
    with timer("preflight"):
        port_or_failure = preflight(space, config, ctx.host, ctx.host_spec.base_port)
        gpu_baseline = None if isinstance(port_or_failure, Failure) else check_gpus_before_launch(
            ctx.host, ctx.host_spec, ctx.known_servers(), space.launch.stop_grace_s)
    if isinstance(port_or_failure, Failure):
        outcome.failure = port_or_failure
        return outcome
    port = port_or_failure
    spec = ctx.engine.build_launch_spec(space, config, ctx.host_spec, port, ctx.host.python())
    short = getattr(ctx.engine, "checks_short_flags", False)
    family = getattr(ctx.engine, "flag_family", None)
    if ctx.known_flags is not None and (problems := flag_problems(spec.argv, ctx.known_flags, short, family)):
        outcome.failure = Failure("preflight", "unsupported_flag", "; ".join(problems))
        return outcome
    ctx.host.take_disruption()  # only a connection drop during this trial makes it an infra fault
    with timer("launch"):
        proc = launch(ctx.host, spec, ctx.trial_dir)
        outcome.launched = True
        ctx.on_started(proc)
    try:
        _serve_and_measure(ctx, outcome, timer, proc, port)
    finally:
        # What a live server holds; after a crash it says nothing and would delay the record.
        serving = _snapshot_or_none(ctx.host) if gpu_baseline is not None and ctx.host.is_alive(proc) else None
        with timer("stop"):
            report = stop(ctx.host, proc, port, space.launch.stop_grace_s)
        (ctx.trial_dir / "stop.json").write_text(json.dumps(asdict(report), indent=2))
        if report.left_behind and outcome.failure is None:
            outcome.failure = Failure("stop", "stop_failed", f"processes left behind: {report.left_behind}")
        if gpu_baseline is not None:
            with timer("gpu_release"):
                released = wait_gpus_released(ctx.host, ctx.host_spec, gpu_baseline, port)
            outcome.gpu_memory = build_gpu_memory_record(gpu_baseline, serving, released)
            (ctx.trial_dir / "gpu_memory.json").write_text(json.dumps(outcome.gpu_memory, indent=2))
    if disruption := ctx.host.take_disruption():
        raise InfraError(f"{disruption} during the trial: its measurements are not kept")
    return outcome


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


def _serve_and_measure(ctx: TrialContext, outcome: TrialOutcome, timer: Callable,
                       proc: ServerProcess, port: int) -> None:
    space = ctx.space
    base_url = ctx.host.base_url(port)
    info = ctx.engine.info
    # the name requests carry; an adapter without served_model serves space.model as given
    served = getattr(ctx.engine, "served_model", None)
    model = served(space) if served else space.model
    with timer("wait_ready"):
        verdict = wait_ready(ctx.host, proc, info, port, model, space.launch)
    if not isinstance(verdict, Ready):
        outcome.failure = Failure("wait_ready", verdict.kind, verdict.message, verdict.log_tail)
        return
    with timer("check_output"):
        samples, failure = check_output(base_url, model, space.check, ctx.reference_samples, ctx.trial_dir,
                                        timeout_s=space.workload.stall_timeout_s or space.launch.stall_timeout_s,
                                        dialect=info.dialect)
        outcome.output_samples = [asdict(s) for s in samples]
        outcome.output_text = samples[0].text if samples else None
    if failure:
        outcome.failure = failure
        return
    with timer("load"):
        place = load_place(ctx.host, ctx.host_spec.load_from, ctx.host_spec.transport, port, model)
        outcome.levels, outcome.failure = run_ladder(
            base_url, model, space.workload, ctx.engine.clock_scale(space), ctx.trial_dir,
            ctx.on_level, lambda: ctx.host.is_alive(proc), info.dialect, place,
            stall_timeout_s=space.launch.stall_timeout_s, vocab_size=served_vocab_size(ctx.host, space.model),
            new_stall=stall_watch(ctx.host, proc, info.stall_lines),
            native_level=native_level_runner(ctx.host, ctx.engine, proc, base_url, model, space.workload)
            if space.workload.load == "native" else None)
    for goal_level in sorted({goal.level for goal in space.goals}):  # one level, or the Pareto pair's
        measured = outcome.levels.get(goal_level)
        if outcome.failure is None and measured is not None and not measured.get("valid"):
            # An invalid measurement never scores: recorded with its reasons, never ranked.
            reasons = "; ".join(measured.get("invalid_reasons") or ["invalid"])
            outcome.failure = Failure("load", "invalid_measurement", reasons)


@contextmanager
def _stage(outcome: TrialOutcome, on_stage: Callable[[str], None], name: str) -> Iterator[None]:
    on_stage(name)
    started = time.monotonic()
    try:
        yield
    finally:
        outcome.stage_seconds[name] = round(time.monotonic() - started, 3)
