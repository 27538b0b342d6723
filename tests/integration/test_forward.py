"""The SSH port forward (sweeper/hosts/forward.py) over a real OpenSSH server: a kept-alive client
connection must end when the server behind it dies or the SSH session dies, and a client closing
must end the channel; a client must see EOF or a reset, never a hang."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

import pytest

from sweeper.spec.hosts import HostSpec
from sweeper.hosts.ssh import SSHHost

# HTTP/1.1 with keep-alive: one connection serves request after request until the client closes.
KEEPALIVE_SERVER = r"""
import sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path == "/hang":  # a reply that never comes, as a stream whose server dies
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.flush()
            threading.Event().wait()
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
print("serving", flush=True)
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""
REQUEST = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"
FAIL_FAST_S = 10.0  # a hang is a forever; this only has to exceed a busy machine's stall


@pytest.fixture
def served(sshd, ssh_home, tmp_path):
    """A keep-alive server on the host, reached through the forward: (host, proc, port, (addr, port))."""
    host = SSHHost("box", HostSpec(**sshd.host_entry(tmp_path / "work")))
    port = 33000 + os.getpid() % 500 * 10
    local = tmp_path / "results" / "fw" / "trials" / "0"
    proc = host.start_detached([sys.executable, "-c", KEEPALIVE_SERVER, str(port)], {}, str(local),
                               str(local / "server.log"), "tok-fw")
    try:
        deadline = time.monotonic() + 20
        while host.port_is_free(port):
            assert time.monotonic() < deadline, "the server never listened"
            time.sleep(0.05)
        url = host.base_url(port)
        yield host, proc, port, ("127.0.0.1", int(url.rsplit(":", 1)[1]))
    finally:
        host.stop_group(proc, 0.5)
        host.close()


def ask(conn: socket.socket) -> bytes:
    """One request on a kept connection; its reply, or b"" when the connection ended."""
    conn.sendall(REQUEST)
    reply = b""
    while not reply.endswith(b"ok"):
        data = conn.recv(4096)
        if not data:
            return b""
        reply += data
    return reply


def sees_the_end(conn: socket.socket) -> None:
    """The client, sending nothing more, reads EOF (or a reset) within FAIL_FAST_S: so a pool
    drops the connection before reusing it, and a reader waiting for a reply stops waiting."""
    conn.settimeout(FAIL_FAST_S)
    try:
        while conn.recv(4096):
            pass
    except ConnectionResetError:
        pass
    except socket.timeout:
        pytest.fail(f"the connection stayed open {FAIL_FAST_S:g} s after its far end died")


def test_a_kept_connection_ends_when_the_server_behind_it_dies(served):
    host, proc, _, address = served
    with socket.create_connection(address, timeout=FAIL_FAST_S) as conn:
        assert ask(conn).startswith(b"HTTP/1.1 200")
        assert ask(conn).startswith(b"HTTP/1.1 200")  # the same connection, kept alive
        host.stop_group(proc, 0.5)
        sees_the_end(conn)


def test_a_reply_in_flight_ends_when_the_server_dies(served):
    host, proc, _, address = served
    with socket.create_connection(address, timeout=FAIL_FAST_S) as conn:
        conn.sendall(b"GET /hang HTTP/1.1\r\nHost: x\r\n\r\n")
        assert conn.recv(4096).startswith(b"HTTP/1.1 200")  # headers came, the body never will
        host.stop_group(proc, 0.5)
        sees_the_end(conn)


def test_a_kept_connection_ends_when_the_ssh_session_dies(served, sshd):
    host, _, _, address = served
    with socket.create_connection(address, timeout=FAIL_FAST_S) as conn:
        assert ask(conn).startswith(b"HTTP/1.1 200")
        session = sshd.session_serving(host.session_local_port())
        assert session
        os.kill(session, signal.SIGKILL)
        sees_the_end(conn)


def test_a_client_closing_ends_its_channel(served):
    host, _, port, address = served
    forward = host._forwards[port]
    conns = [socket.create_connection(address, timeout=FAIL_FAST_S) for _ in range(3)]
    for conn in conns:
        assert ask(conn).startswith(b"HTTP/1.1 200")
    assert forward.open_connections() == 3
    for conn in conns:
        conn.close()
    deadline = time.monotonic() + FAIL_FAST_S
    while forward.open_connections():
        assert time.monotonic() < deadline, "the forward still pipes closed connections"
        time.sleep(0.02)
    with socket.create_connection(address, timeout=FAIL_FAST_S) as conn:  # and it still serves
        assert ask(conn).startswith(b"HTTP/1.1 200")
