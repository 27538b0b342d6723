"""The one launch path (trial/launch.py) as `sweeper profile` takes it, against a real simulator:
with the default workload (no workload.stall_timeout_s) a hang under load is caught by the launch's
stall timeout, as a trial's is, and the server is stopped."""

from __future__ import annotations

import json
import threading

import pytest

from sweeper.engines import get_engine
from sweeper.errors import UserError
from sweeper.hosts.local import LocalHost
from sweeper.hosts.base import ServerProcess
from sweeper.hosts.procfs import live_group_members
from sweeper.profile.run import ProfileContext, ProfileRequest, profile_config
from sweeper.spec.hosts import HostSpec
from sweeper.spec.space_file import parse_space
from sweeper.trial.context import TrialContext, TrialOutcome
from sweeper.trial.launch import launched_server
from tests.support.ports import worker_port

# The workload sets no stall timeout (the default): the launch's 2 s must apply. Its request
# timeout is short so that a stalled request without the fallback fails in 30 s, not 600.
SPACE = parse_space("""\
name: launch-path
engine: sim
model: deepseek-ai/DeepSeek-V4-Flash
fixed_env: {SGL_FORCE_SHUTDOWN: "1", NCCL_P2P_DISABLE: "1"}
parameters:
  hang_after: {type: categorical, choices: [16, 100000], flag: --hang-after-requests}
fixed_flags: {--time-scale: 0.02, --load-seconds: 5, --noise: 0, --tp-size: 8, --mem-fraction-static: 0.7}
workload: {input_len: 16, output_len: 8, concurrency: [4], request_timeout_s: 30}
launch: {ready_timeout_s: 60, stall_timeout_s: 2, stop_grace_s: 5, poll_interval_s: 0.1}
""", "inline")


@pytest.fixture
def host():
    h = LocalHost("local", HostSpec(transport="local", gpu_gate="off", base_port=worker_port(36500)))
    yield h
    h.close()


def profile_in_time(ctx, config, request, limit_s: float) -> BaseException | None:
    """What profile_config raised within `limit_s` (None: it returned); a profile still running
    then fails the test, after its server is stopped so that the profile ends."""
    raised: list[BaseException | None] = []

    def run() -> None:
        try:
            profile_config(ctx, config, request)
            raised.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            raised.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(limit_s)
    if worker.is_alive():
        proc = ServerProcess.from_dict(json.loads((ctx.profile_dir / "process.json").read_text()))
        ctx.host.stop_group(proc, 5)
        worker.join(60)
        pytest.fail(f"the profile of a hung server was still running after {limit_s:g} s")
    return raised[0]


def test_a_hang_while_profiling_with_the_default_workload_is_caught(host, tmp_path):
    # Readiness (1 request), the gate (8) and the warmup (4) pass; the profiled load hangs after 3 more.
    ctx = ProfileContext(space=SPACE, engine=get_engine("sim"), host=host, host_spec=host.spec,
                         profile_dir=tmp_path / "profile")
    raised = profile_in_time(ctx, {"hang_after": 16}, ProfileRequest(concurrency=4, seconds=5), limit_s=40)
    assert isinstance(raised, UserError) and "hung" in str(raised), raised
    pgid = json.loads((tmp_path / "profile" / "process.json").read_text())["pgid"]
    assert live_group_members(pgid) == []  # the server was stopped


def test_launched_server_stops_its_server_when_the_block_is_interrupted(host, tmp_path):
    ctx = TrialContext(space=SPACE, engine=get_engine("sim"), host=host, host_spec=host.spec, trial_dir=tmp_path)
    outcome = TrialOutcome(config={"hang_after": 100000})
    with pytest.raises(KeyboardInterrupt):
        with launched_server(ctx, outcome.config, outcome) as server:
            assert server is not None and server.still_alive()
            assert (server.model, server.stall_timeout_s) == (SPACE.model, SPACE.launch.stall_timeout_s)
            raise KeyboardInterrupt  # as Ctrl-C mid-load
    assert live_group_members(server.proc.pgid) == []
    assert json.loads((tmp_path / "stop.json").read_text())["was_running"] is True
    assert list(outcome.stage_seconds) == ["preflight", "launch", "wait_ready", "stop"]
