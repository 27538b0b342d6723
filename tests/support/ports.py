"""Free TCP ports for test servers."""

from __future__ import annotations

import os
import socket

from sweeper.trial.launch import CANDIDATE_PORTS


def free_port() -> int:
    """A port on 127.0.0.1 the kernel just handed out and released: no other server holds it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_port_on(host, first: int, step: int = 1) -> int:
    """The first port from `first` (every `step`-th, 1000 ports at most) that `host.port_is_free`
    calls free: the host's own probe, so it also works through an SSH host."""
    return next(p for p in range(first, first + 1000, step) if host.port_is_free(p))


# Ports above its base a sweep may take: base-port candidates (sweeper/trial/launch.py), each with
# ports the engine derives up to ~1000 above it.
SWEEP_REACH = CANDIDATE_PORTS + 1000
# The lowest and highest fixed base port the tests pass to worker_port (tests/unit/test_worker_ports
# reads them all). Each xdist worker's range lies a whole span below the last, so no two overlap:
# with a 4000 stride they did (gw1's 35000 was gw0's 31000), and a watchdog test found its port
# taken three times (CI of 4d6d073). Worker 0 keeps the real ports.
FIXED_BASES = (31000, 41000)
WORKER_PORT_STRIDE = FIXED_BASES[1] + SWEEP_REACH - FIXED_BASES[0]
WORKER_RANGES = 3  # 31000 - 2 * 13000 = 5000: still above the privileged ports


def worker_number() -> int:
    """This pytest-xdist worker's number (gw3 -> 3); 0 in a run without workers."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") else 0


def worker_port(port: int) -> int:
    """A fixed base port moved into this worker's own range: sweeps of parallel workers that start
    at the same moment never race for the same free port (each checks a port free, then binds it).
    The port itself in a run without workers."""
    return port - WORKER_PORT_STRIDE * (worker_number() % WORKER_RANGES)



def server_socket(family: int = socket.AF_INET) -> socket.socket:
    """A TCP socket that binds as uvicorn's, SGLang's, llama-server's and the simulator's listeners do
    (SO_REUSEADDR): a closed connection in TIME_WAIT on its port does not stop the bind, a live
    listener does. Without it a test's listener failed on base_port + 235 after earlier sweeps
    (clean-clone run, 2026-12-06: EADDRINUSE in test_a_busy_internal_port_of_the_engine)."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return sock
