"""The client's kept-alive connections against real servers.

A server that dies under load: the level ends in failed samples and an invalid level within
seconds, never a hang, whether the client reaches the server directly or through the SSH port
forward (a real OpenSSH server, tests/sshd.py). The server is bench/refserver.py (raw asyncio,
keep-alive), killed with SIGKILL as a crash would. And the real llama-server, which closes every
connection after a streamed response while advertising keep-alive: every request still succeeds."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sweeper.spec.hosts import HostSpec
from sweeper.hosts.ssh import SSHHost
from sweeper.loadgen.client import StreamOptions, run_level
from sweeper.loadgen.metrics import summarize_level
from sweeper.loadgen.workload import build_prompt_token_ids
from tests.llamacpp import LLAMA_SERVER, needs_llama_server, tiny_gguf  # noqa: F401

REFSERVER = Path(__file__).resolve().parents[2] / "bench" / "refserver.py"
HANG_S = 60.0  # each request's own timeout: a level that hangs lasts at least this long
FAST_S = 20.0  # a busy machine's slack; a hang is HANG_S or more


def refserver_argv(port: int) -> list[str]:
    return [sys.executable, str(REFSERVER), "--port", str(port), "--ttft-ms", "5", "--gap-ms", "5"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_listening(port: int) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            assert time.monotonic() < deadline, "the reference server never listened"
            time.sleep(0.05)


def level_with_a_crash(base_url: str, kill) -> tuple[dict, list, float]:
    """Run a level of 400 requests at C = 4 (~40 s if nothing failed), kill the server 1 s in."""
    result = {}

    def drive():
        options = StreamOptions(timeout_s=HANG_S)
        result["run"] = run_level(base_url, "ref", build_prompt_token_ids(400, 16, seed=3), 20, 4, options=options)

    thread = threading.Thread(target=drive, daemon=True)
    started = time.monotonic()
    thread.start()
    time.sleep(1.0)
    kill()
    thread.join(HANG_S + 30)
    elapsed = time.monotonic() - started
    assert not thread.is_alive(), "the level never ended"
    run = result["run"]
    summary = summarize_level(run.samples, 4, run.duration_s, requested_output_len=20, lag=run.lag)
    return summary, run.samples, elapsed


def check_failed_fast(summary: dict, samples: list, elapsed: float) -> None:
    assert elapsed < FAST_S, f"the level took {elapsed:.1f} s after the server died"
    done = [s for s in samples if s.ok]
    assert 4 <= len(done) < 400, len(done)  # kept connections carried requests before the crash
    assert all(s.error for s in samples if not s.ok)
    assert not summary["valid"]
    assert any("requests failed" in reason for reason in summary["invalid_reasons"]), summary["invalid_reasons"]


def test_a_server_crash_behind_kept_connections_fails_the_level_fast():
    port = free_port()
    server = subprocess.Popen(refserver_argv(port), stdout=subprocess.DEVNULL)
    try:
        wait_listening(port)
        summary, samples, elapsed = level_with_a_crash(f"http://127.0.0.1:{port}", server.kill)
    finally:
        server.kill()
        server.wait(10)
    check_failed_fast(summary, samples, elapsed)


@pytest.mark.slow
def test_a_server_crash_through_the_ssh_forward_fails_the_level_fast(sshd, ssh_home, tmp_path):
    host = SSHHost("box", HostSpec(**sshd.host_entry(tmp_path / "work")))
    port = 33500 + os.getpid() % 400 * 10
    local = tmp_path / "results" / "ds" / "trials" / "0"
    proc = host.start_detached(refserver_argv(port), {}, str(local), str(local / "server.log"), "tok-ds")
    try:
        deadline = time.monotonic() + 20
        while host.port_is_free(port):
            assert time.monotonic() < deadline, "the reference server never listened"
            time.sleep(0.05)
        url = host.base_url(port)
        assert url != f"http://127.0.0.1:{port}"  # through the forward
        summary, samples, elapsed = level_with_a_crash(url, lambda: host.stop_group(proc, 0.0))
    finally:
        host.stop_group(proc, 0.5)
        host.close()
    check_failed_fast(summary, samples, elapsed)


@needs_llama_server
def test_llama_server_closing_kept_connections_costs_no_request(tiny_gguf):
    port = free_port()
    server = subprocess.Popen([LLAMA_SERVER, "-m", str(tiny_gguf), "--port", str(port), "-np", "4", "-t", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(port)
        deadline = time.monotonic() + 60
        while True:  # listening comes before the model is loaded: 503 until then
            run = run_level(f"http://127.0.0.1:{port}", "m", build_prompt_token_ids(4, 8, seed=4), 2, 4)
            if all(s.ok for s in run.samples):
                break
            assert time.monotonic() < deadline, run.samples[0].error
            time.sleep(0.2)
        run = run_level(f"http://127.0.0.1:{port}", "m", build_prompt_token_ids(24, 16, seed=5), 8, 4)
    finally:
        server.kill()
        server.wait(10)
    assert [s.error for s in run.samples if not s.ok] == []
    assert all(s.output_tokens == 8 for s in run.samples)
