"""The llamacpp adapter against the real llama-server: readiness, broken configs classified from the
server's own log lines within 2 s with nothing left running (on this host and over SSH, through the
test sshd), and the output-check modes."""

from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path

import pytest

from sweeper.spec.hosts import HostSpec
from sweeper.spec.space import Launch, OutputCheck
from sweeper.spec.space_file import parse_space
from sweeper.trial.gate import OutputSample
from sweeper.engines.llamacpp import LLAMACPP_INFO, LlamaCppEngine
from sweeper.hosts.procfs import live_group_members
from sweeper.trial.launch import Crashed, Ready, stop, wait_ready
from sweeper.trial.pipeline import check_output
from tests.support.hosts import local_host, ssh_host
from tests.support.llamacpp import needs_llama_server
from tests.support.ports import free_port_on, worker_port

pytestmark = [pytest.mark.slow, needs_llama_server]

FAST = Launch(ready_timeout_s=30, stall_timeout_s=10, stop_grace_s=2, poll_interval_s=0.1)


@pytest.fixture(params=["local", "ssh"])
def host(request, tmp_path):
    """This machine directly, or reached over SSH (the test sshd: the server's log is read, its
    process group stopped and its port probed through the connection)."""
    if request.param == "local":
        h = local_host()
    else:
        sshd = request.getfixturevalue("sshd")
        request.getfixturevalue("ssh_home")
        h = ssh_host(sshd, tmp_path, gpus=0, gpu_gate="off", env={"PATH": "/usr/local/bin:/usr/bin:/bin"})
    yield h
    h.close()


def space_for(model, fixed: str = "{}"):
    return parse_space(f"name: t\nengine: llamacpp\nmodel: {model}\nfixed_flags: {fixed}\n"
                       "parameters:\n  threads: {type: categorical, choices: [1, 2], flag: -t}\n", "t.yaml")


def free_port(host) -> int:
    return free_port_on(host, worker_port(34000), step=10)


def start(host, tmp_path, space, port, config=None):
    spec = LlamaCppEngine().build_launch_spec(space, config or {"threads": 2}, HostSpec(transport="local"),
                                              port, "python")
    return host.start_detached(spec.argv, spec.env, str(tmp_path), str(tmp_path / "server.log"),
                               uuid.uuid4().hex)


def start_and_wait(host, tmp_path, space, port):
    proc = start(host, tmp_path, space, port)
    started = time.monotonic()
    verdict = wait_ready(host, proc, LLAMACPP_INFO, port, space.model, FAST)
    return proc, verdict, time.monotonic() - started


def oversized_context() -> int:
    """A context whose f32 KV cache (64 KiB a token for 32 x 256) is 4x this machine's RAM + swap:
    a single allocation the kernel refuses at once (heuristic overcommit)."""
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    total = (int(meminfo["MemTotal"].split()[0]) + int(meminfo["SwapTotal"].split()[0])) * 1024
    return 1 << (4 * total // 65536).bit_length()


@pytest.mark.parametrize("case, kind, line", [
    ("missing_model", "model_missing", "failed to open GGUF file"),
    ("huge_context", "oom", "insufficient memory"),
])
@pytest.mark.alone  # a 2-second bound
def test_a_broken_config_is_classified_from_the_log_within_two_seconds(host, tmp_path, llama_env, deep_gguf,
                                                                       case, kind, line):
    if case == "missing_model":
        space = space_for(tmp_path / "no-such-model.gguf")
    else:
        if Path("/proc/sys/vm/overcommit_memory").read_text().strip() == "1":
            pytest.skip("overcommit_memory=1: the kernel grants any allocation")
        space = space_for(deep_gguf, f"{{-c: {oversized_context()}, -ctk: f32, -ctv: f32, -fit: 'off', --no-warmup: true}}")
    port = free_port(host)
    proc, verdict, seconds = start_and_wait(host, tmp_path, space, port)
    report = stop(host, proc, port, FAST.stop_grace_s)
    assert isinstance(verdict, Crashed) and verdict.kind == kind, verdict
    assert seconds < 2.0
    assert line in verdict.log_tail
    assert live_group_members(proc.pgid) == [] and not report.left_behind
    assert host.port_is_free(port)


@pytest.mark.alone  # a 2-second bound
def test_a_busy_port_is_the_servers_own_bind_error(host, tmp_path, llama_env, tiny_gguf):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))  # bound, not listening: the health probe is refused at once
    port = holder.getsockname()[1]  # the kernel's pick: never a port another socket holds
    try:
        proc, verdict, seconds = start_and_wait(host, tmp_path, space_for(tiny_gguf), port)
        stop(host, proc, port, FAST.stop_grace_s)
    finally:
        holder.close()
    assert isinstance(verdict, Crashed) and verdict.kind == "port_busy", verdict
    assert "couldn't bind HTTP server socket" in verdict.log_tail and seconds < 2.0
    assert live_group_members(proc.pgid) == []


def test_a_good_config_is_ready_and_the_check_modes_behave(host, tmp_path, llama_env, tiny_gguf):
    space = space_for(tiny_gguf)
    port = free_port(host)
    proc, verdict, seconds = start_and_wait(host, tmp_path, space, port)
    try:
        assert isinstance(verdict, Ready), verdict
        url = host.base_url(port)
        def check(mode):
            return OutputCheck(mode=mode, max_tokens=8, prompts=["The capital of France is"])

        samples, failure = check_output(url, space.model, check("none"), None, tmp_path)
        assert failure is None and samples[0].text
        again, _ = check_output(url, space.model, check("none"), None, tmp_path)
        assert again[0].text == samples[0].text  # greedy and the same server: the same tokens
        _, failure = check_output(url, space.model, check("reference-only"), None, tmp_path)
        assert failure is None  # no reference yet: nothing to compare, no garbage detector
        other = [OutputSample("The capital of France is", " zz" * 8)]
        _, failure = check_output(url, space.model, check("reference-only"), other, tmp_path)
        assert failure is not None and failure.kind == "bad_output"
        assert (tmp_path / "output_check.json").is_file()
    finally:
        stop(host, proc, port, FAST.stop_grace_s)
    assert live_group_members(proc.pgid) == []
