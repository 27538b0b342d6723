"""`load_from: host` over a real OpenSSH server (tests/support/sshd.py): the client's modules are shipped
to the host and run there with the host's python, against the server's own port (not the SSH
forward); the raw samples come back into the same LevelRun the controller would have measured."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from sweeper.errors import UserError
from sweeper.loadgen.client import StreamOptions
from sweeper.loadgen.metrics import summarize_level
from sweeper.loadgen.onhost import host_can_load, host_runner, load_place
from sweeper.loadgen.workload import build_prompt_token_ids
from tests.support.fake_servers import MODEL
from tests.support.hosts import ssh_host

BARE_PYTHON = "/usr/bin/python3"  # Debian's python: no aiohttp, no uvloop, nothing but the standard library


def server_port(server) -> int:
    return int(server.base_url.rsplit(":", 1)[1])


def test_a_level_runs_on_the_host_and_its_samples_come_back(serve, sshd, ssh_home, tmp_path):
    server = serve(token_delay_s=0.005)
    host = ssh_host(sshd, tmp_path)
    try:
        place = load_place(host, "host", "ssh", server_port(server), MODEL)
        assert place.where == "host"
        run = place.run(build_prompt_token_ids(8, 16, seed=1), 6, 4, StreamOptions())
        assert host._forwards == {}  # the host's client went to the server's port, not through the forward
    finally:
        host.close()
    assert len(run.samples) == 8 and all(s.ok for s in run.samples), [s.error for s in run.samples]
    assert [s.prompt_tokens for s in run.samples] == [16] * 8
    assert all(s.output_tokens == s.streamed_tokens == 6 and len(s.chunk_times) == 6 for s in run.samples)
    assert server.state.max_inflight == 4 and len(server.state.payloads) == 8
    assert run.lag.ticks > 0 and run.duration_s > 0
    # the shipped copy ran (not an installed sweeper), with the host's python, and was cleaned up
    assert Path(run.ran["client"]).parts[-4].startswith("sweeper-load-"), run.ran
    assert run.ran["python"] == sys.executable
    assert not Path(run.ran["client"]).exists()
    summary = summarize_level(run.samples, 4, run.duration_s, requested_output_len=6, lag=run.lag)
    assert summary["completed"] == 8 and summary["output_throughput"] > 0


def test_failed_requests_on_the_host_come_back_as_failed_samples(sshd, ssh_home, tmp_path):
    host = ssh_host(sshd, tmp_path)
    try:
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            port = closed.getsockname()[1]
        run = host_runner(host, port, MODEL)(build_prompt_token_ids(3, 4, seed=2), 4, 2, StreamOptions())
    finally:
        host.close()
    assert [s.ok for s in run.samples] == [False] * 3
    assert all("Connect" in s.error for s in run.samples), [s.error for s in run.samples]


@pytest.mark.skipif(not os.path.exists(BARE_PYTHON), reason="needs the system's python3")
def test_a_bare_python_on_the_host_is_enough_and_a_missing_one_means_the_controller(serve, sshd, ssh_home,
                                                                                   tmp_path):
    server = serve(token_delay_s=0.002)
    bare = ssh_host(sshd, tmp_path, python=BARE_PYTHON)
    missing = ssh_host(sshd, tmp_path, python="/nonexistent/python3")
    missing.name = "no-python-box"  # its own probe result
    try:
        assert host_can_load(bare) and not host_can_load(missing)
        place = load_place(bare, "auto", "ssh", server_port(server), MODEL)
        assert place.where == "host"
        run = place.run(build_prompt_token_ids(4, 8, seed=3), 5, 2, StreamOptions())
        assert run.ran["python"] == BARE_PYTHON and run.ran["loop"] == "asyncio"
        assert all(s.ok and s.output_tokens == 5 for s in run.samples), [s.error for s in run.samples]
        assert load_place(missing, "auto", "ssh", server_port(server), MODEL).where == "controller"
        assert load_place(bare, "controller", "ssh", server_port(server), MODEL).where == "controller"
        forced = load_place(missing, "host", "ssh", server_port(server), MODEL)
        with pytest.raises(UserError, match=r"load_from: host needs python >= 3.9 on the host "
                                            r"\(/nonexistent/python3\).*or load_from: controller"):
            forced.run(build_prompt_token_ids(1, 4, seed=3), 2, 1, StreamOptions())
    finally:
        bare.close()
        missing.close()


def test_local_hosts_always_load_from_the_controller():
    class Local:
        name = "local"

        def base_url(self, port):
            return f"http://127.0.0.1:{port}"

    assert load_place(Local(), "host", "local", 1234, MODEL).where == "controller"


def test_an_open_loop_runs_on_the_host_at_its_send_times_and_cap(serve):
    """The host half (hostmain.py, shipped and run by a real python subprocess; a local host's
    run_python here, so no sshd is needed) runs an open loop when given send times: each request
    leaves at its offset, at most the cap in flight."""
    from tests.support.hosts import local_host

    server = serve(token_delay_s=0.02)
    offsets = [0.0, 0.05, 0.1, 0.15, 0.2, 0.25]
    run = host_runner(local_host(), server_port(server), MODEL)(build_prompt_token_ids(6, 8, seed=4), 5, 2,
                                                                StreamOptions(), None, offsets=offsets)
    assert Path(run.ran["client"]).parts[-4].startswith("sweeper-load-"), run.ran  # the shipped copy ran
    assert len(run.samples) == 6 and all(s.ok for s in run.samples), [s.error for s in run.samples]
    starts = sorted(s.start - run.start for s in run.samples)
    assert starts[0] < 0.03 and starts[1] >= 0.045  # not all at once: at the send times (or later, when capped)
    assert server.state.max_inflight <= 2  # the cap
    free = host_runner(local_host(), server_port(server), MODEL)(build_prompt_token_ids(4, 8, seed=5), 5, 0,
                                                                 StreamOptions(), None, offsets=[0.0] * 4)
    assert all(s.ok for s in free.samples) and server.state.max_inflight >= 3  # 0: no cap, all four at once
