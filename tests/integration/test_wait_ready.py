"""wait_ready against real processes and real HTTP servers: verdicts and how fast they come."""

from __future__ import annotations

import sys
import time
import uuid

import pytest

from sweeper.spec.space import Launch
from sweeper.engines.sglang import SGLANG_INFO
from sweeper.trial.launch import Crashed, TimedOut, wait_ready
from tests.support.hosts import local_host
from tests.support.ports import free_port_on, worker_port

FAST = Launch(ready_timeout_s=20, stall_timeout_s=3, stop_grace_s=1, poll_interval_s=0.2)


@pytest.fixture
def host():
    h = local_host()
    yield h
    h.close()


def launch(host, tmp_path, code):
    return host.start_detached([sys.executable, "-c", code], {}, str(tmp_path),
                               str(tmp_path / "server.log"), uuid.uuid4().hex)


def free_port(host):
    return free_port_on(host, worker_port(33000))


@pytest.mark.alone  # a 2-second bound
def test_a_silent_exit_is_noticed_within_two_seconds(host, tmp_path):
    proc = launch(host, tmp_path, "import time; print('Load weight begin', flush=True); time.sleep(1.0)")
    exited_by = time.monotonic() + 1.0
    verdict = wait_ready(host, proc, SGLANG_INFO, free_port(host), "m", FAST)
    assert isinstance(verdict, Crashed) and verdict.kind == "crash"
    assert time.monotonic() - exited_by < 2.0
    assert "Load weight begin" in verdict.log_tail


def test_a_failure_line_is_noticed_while_the_process_lingers(host, tmp_path):
    code = ("import time\nprint('Capture cuda graph begin', flush=True)\n"
            "print('[TP0] Capture cuda graph failed: CUDA error', flush=True)\ntime.sleep(30)")
    proc = launch(host, tmp_path, code)
    started = time.monotonic()
    verdict = wait_ready(host, proc, SGLANG_INFO, free_port(host), "m", FAST)
    assert isinstance(verdict, Crashed) and verdict.kind == "cuda_graph_capture"
    assert time.monotonic() - started < 2.0
    host.stop_group(proc, 1)


def test_a_stalled_start_is_a_hang_not_a_full_timeout(host, tmp_path):
    proc = launch(host, tmp_path, "import time; print('Init torch distributed begin.', flush=True); time.sleep(60)")
    started = time.monotonic()
    verdict = wait_ready(host, proc, SGLANG_INFO, free_port(host), "m", FAST)
    assert isinstance(verdict, TimedOut) and verdict.kind == "hang"
    assert FAST.stall_timeout_s <= time.monotonic() - started < FAST.stall_timeout_s + 2
    host.stop_group(proc, 1)


def test_a_slow_start_with_progress_lines_is_not_a_hang(host, tmp_path):
    code = ("import time\nfor i in range(100):\n    print(f'Loading safetensors checkpoint shards: {i}%', flush=True)\n"
            "    time.sleep(0.5)\n")
    proc = launch(host, tmp_path, code)
    slow = Launch(ready_timeout_s=6, stall_timeout_s=2, stop_grace_s=1, poll_interval_s=0.2)
    verdict = wait_ready(host, proc, SGLANG_INFO, free_port(host), "m", slow)
    assert isinstance(verdict, TimedOut) and verdict.kind == "timeout"
    host.stop_group(proc, 1)


def test_health_200_is_not_enough_a_generation_must_succeed(host, tmp_path):
    """A server whose /health_generate says 200 but whose completions fail never becomes Ready."""
    port = free_port(host)
    code = f"""
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'ok')
    def do_POST(self):
        self.send_response(500); self.end_headers(); self.wfile.write(b'scheduler hung')
    def log_message(self, *a): pass
print('Uvicorn running', flush=True)
http.server.HTTPServer(('127.0.0.1', {port}), H).serve_forever()
"""
    proc = launch(host, tmp_path, code)
    short = Launch(ready_timeout_s=3, stall_timeout_s=10, stop_grace_s=1, poll_interval_s=0.2)
    verdict = wait_ready(host, proc, SGLANG_INFO, port, "m", short)
    assert isinstance(verdict, TimedOut) and verdict.kind == "timeout"
    host.stop_group(proc, 1)


def test_a_port_taken_by_someone_else_is_never_measured(host, tmp_path):
    """Between the free-port check and the bind, another server took the port: the verdict must
    not be Ready even though the port answers 200 and generates."""
    import http.server
    import threading

    class Healthy(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    other = http.server.HTTPServer(("127.0.0.1", 0), Healthy)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        proc = launch(host, tmp_path, "import time; print('Load weight begin', flush=True); time.sleep(30)")
        verdict = wait_ready(host, proc, SGLANG_INFO, other.server_address[1], "m", FAST)
        assert isinstance(verdict, Crashed) and verdict.kind == "port_busy"
        host.stop_group(proc, 1)
    finally:
        other.shutdown()


def test_a_server_that_answered_and_is_dying_is_its_crash_not_a_busy_port(host, tmp_path):
    """It answers /health once from a listener it closes as it answers, then takes a second to
    die: its socket is gone before its exit. Before: PORT_BUSY (llama.cpp's huge context, once)."""
    port = free_port(host)
    code = f"""
import http.server, sys, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.server.socket.close()
        self.send_response(503); self.end_headers(); self.wfile.write(b'loading')
        self.server.answered = True
    def log_message(self, *a): pass
server = http.server.HTTPServer(('127.0.0.1', {port}), H)
server.answered = False
print('Load weight begin', flush=True)
while not server.answered:
    server.handle_request()
time.sleep(1.0)
sys.exit(1)
"""
    proc = launch(host, tmp_path, code)
    verdict = wait_ready(host, proc, SGLANG_INFO, port, "m", FAST)
    assert isinstance(verdict, Crashed) and verdict.kind != "port_busy", verdict
    host.stop_group(proc, 1)
