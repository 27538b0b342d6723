"""One trial: preflight -> launch -> wait_ready -> check_output -> load ladder -> stop.

launch.py launches the config and always stops it (launched_server); this module checks the ready
server's outputs and measures its ladder (ladder.py). A config-caused failure comes back as data
(a Failure in the outcome); only infrastructure faults raise (InfraError).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from sweeper.levels import short_level
from sweeper.engines.adapter import config_gpus
from sweeper.errors import InfraError
from sweeper.loadgen.metrics import spoiled_by_client
from sweeper.loadgen.endpoints import RequestDialect
from sweeper.loadgen.onhost import load_place
from sweeper.outcomes import FailureKind, Stage
from sweeper.spec.space import OutputCheck
from sweeper.trial.context import Failure, TrialContext, TrialOutcome
from sweeper.trial.energy import PowerMeter
from sweeper.trial.gate import GateError, GateTimeout, OutputSample, collect_samples, judge, write_check_file
from sweeper.trial.load_ladder import (LadderRun, build_level_plan, build_level_probe, capacity_search, measure_capacity,
                                  measure_levels, measure_native_levels, served_vocab_size, stall_watch)
from sweeper.trial.native import native_level_runner
from sweeper.trial.launch import LaunchedServer, launched_server, timed_stage

def run_trial(ctx: TrialContext, config: Mapping[str, Any]) -> TrialOutcome:
    outcome = TrialOutcome(config=dict(config))
    with launched_server(ctx, config, outcome) as server:
        if server is not None:
            _check_and_measure(ctx, outcome, server)
    if outcome.launched and (disruption := ctx.host.take_disruption()):
        raise InfraError(f"{disruption} during the trial: its measurements are not kept")
    return outcome


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
        kind = FailureKind.HANG if isinstance(exc, GateTimeout) else FailureKind.GENERATION_ERROR
        return [], Failure(Stage.CHECK_OUTPUT, kind, str(exc))
    if check.mode == "none" or (check.mode == "reference-only" and reference is None):
        write_check_file(trial_dir, samples, None)
        return samples, None  # a generation succeeded: all this mode asks
    verdict = judge(samples, reference, check)
    write_check_file(trial_dir, samples, verdict)
    if verdict.passed:
        return samples, None
    return samples, Failure(Stage.CHECK_OUTPUT, FailureKind.BAD_OUTPUT,
                            f"{'; '.join(verdict.reasons)} (compared with the {verdict.compared_with}; "
                            "samples in output_check.json)")


def check_server_output(ctx: TrialContext, server: LaunchedServer) -> tuple[list[OutputSample], Failure | None]:
    """The gate against a launched server, with the watchdog's stall timeout as its hang bound."""
    return check_output(server.base_url, server.model, ctx.space.check, ctx.reference_samples, ctx.trial_dir,
                        timeout_s=server.stall_timeout_s, dialect=server.dialect)


def _check_and_measure(ctx: TrialContext, outcome: TrialOutcome, server: LaunchedServer) -> None:
    space = ctx.space
    timer: Callable = partial(timed_stage, outcome, ctx.on_stage)
    with timer("check_output"):
        samples, failure = check_server_output(ctx, server)
        outcome.output_samples = [asdict(s) for s in samples]
        outcome.output_text = samples[0].text if samples else None
    if failure:
        outcome.failure = failure
        return
    with timer("load"):
        if space.workload.load == "native":
            native = native_level_runner(ctx.host, ctx.engine, server.proc, server.base_url, server.model,
                                         space.workload)
            outcome.levels, outcome.failure = measure_native_levels(space.workload.concurrency, native,
                                                                    ctx.on_level, server.still_alive)
        else:
            place = load_place(ctx.host, ctx.host_spec.load_from, ctx.host_spec.transport, server.port, server.model)
            plan = build_level_plan(space.workload, server.dialect, ctx.engine.clock_scale(space),
                                    server.stall_timeout_s, served_vocab_size(ctx.host, space.model),
                                    build_level_probe(server.base_url, server.model, ctx.engine.info, space.workload),
                                    ctx.engine.info.measure)
            stalls = stall_watch(ctx.host, server.proc, ctx.engine.info.stall_lines)
            pgid = server.proc.pgid if ctx.host_spec.transport == "local" else None
            gpus = config_gpus(space, ctx.engine.info, outcome.config, server.argv)
            with power_meter(ctx, server, gpus) as power:
                run = LadderRun(plan, place, ctx.trial_dir, ctx.on_level, server.still_alive, stalls, gpus, power, pgid)
                if space.finds_capacity:
                    outcome.levels, outcome.capacity, outcome.failure = measure_capacity(run, capacity_search(space))
                    return  # an invalid level is one where the SLO does not hold: it never scores
                outcome.levels, outcome.failure = measure_levels(run)
    for goal_level in sorted({goal.level for goal in space.goals}):  # one level, or the Pareto pair's
        measured = outcome.levels.get(goal_level)
        if outcome.failure is None and measured is not None and not measured.get("valid"):
            reasons = "; ".join(measured.get("invalid_reasons") or ["invalid"])
            if spoiled_by_client(measured):
                # still the harness's own fault after its retries: an infrastructure fault (the
                # trial is queued again), never the config's
                raise InfraError(f"the load client spoiled {short_level(goal_level)} (after {measured.get('harness_retries')} "
                                 f"retries): {reasons}")
            # An invalid measurement never scores: recorded with its reasons, never ranked.
            outcome.failure = Failure(Stage.LOAD, FailureKind.INVALID_MEASUREMENT, reasons)


@contextmanager
def power_meter(ctx: TrialContext, server: LaunchedServer, gpus: int | None) -> Iterator[PowerMeter | None]:
    """A meter of the power of the server's GPUs (its first `gpus` of those the trial may use)
    while the block runs; None where the GPU gate is off (no nvidia-smi to read)."""
    if server.gpu_indices is None:
        yield None
        return
    with PowerMeter(ctx.host.gpu_power, server.gpu_indices[:gpus] if gpus else server.gpu_indices) as meter:
        yield meter
