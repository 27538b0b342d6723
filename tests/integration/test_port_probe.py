"""The port probe means the same on both transports: the same socket states give the same answer on
the local host and over the real sshd (tests/sshd.py; the SSH host is this machine, so both see the
same sockets). "Free" means a server can listen there, on 127.0.0.1 or 0.0.0.0, with SO_REUSEADDR
as servers bind; a port that anything listens on, at any address, is busy."""

from __future__ import annotations

import socket
import time
from contextlib import contextmanager

import pytest

from sweeper.spec.hosts import HostSpec
from sweeper.hosts.local import LocalHost
from sweeper.hosts.ssh import SSHHost
from tests.support.ports import server_socket


@pytest.fixture
def hosts(sshd, ssh_home, tmp_path):
    both = {"local": LocalHost("local", HostSpec(transport="local")),
            "ssh": SSHHost("box", HostSpec(**sshd.host_entry(tmp_path / "work")))}
    yield both
    for host in both.values():
        host.close()


@contextmanager
def listener(address: str, family: int = socket.AF_INET):
    sock = server_socket(family)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    with sock:
        sock.bind((address, 0))
        sock.listen()
        yield sock.getsockname()[1]


@contextmanager
def bound_not_listening():
    with socket.socket() as sock:  # no SO_REUSEADDR, as a client's socket: no server can bind there
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@contextmanager
def free():
    with socket.socket() as sock:  # the kernel's pick, let go at once
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    yield port


@contextmanager
def time_wait():
    """A stopped server's closed connection: the server side closes first, so its end sits in
    TIME_WAIT for a minute."""
    server = server_socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()
    time.sleep(0.1)
    client.close()
    server.close()
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # the TIME_WAIT is there: a bind without SO_REUSEADDR fails
    yield port


CASES = {
    "listening on 127.0.0.1": (lambda: listener("127.0.0.1"), False),
    "listening on 0.0.0.0": (lambda: listener("0.0.0.0"), False),
    "listening on another address (127.0.0.2)": (lambda: listener("127.0.0.2"), False),
    "listening on IPv6 ::1 only": (lambda: listener("::1", socket.AF_INET6), False),
    "bound by a socket that does not listen": (bound_not_listening, False),
    "free": (free, True),
    "in TIME_WAIT after a closed connection": (time_wait, True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_port_probe_gives_the_same_answer_on_both_transports(hosts, case):
    if "IPv6" in case and not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    hold, expected = CASES[case]
    with hold() as port:
        answers = {name: host.port_is_free(port) for name, host in hosts.items()}
    assert answers == {"local": expected, "ssh": expected}


@pytest.mark.parametrize("address", ["127.0.0.1", "0.0.0.0"])
def test_a_port_the_probe_calls_free_takes_a_server_on_either_address(hosts, address):
    with time_wait() as port:
        assert all(host.port_is_free(port) for host in hosts.values())
        with server_socket() as server:
            server.bind((address, port))
            server.listen()
            assert not any(host.port_is_free(port) for host in hosts.values())
