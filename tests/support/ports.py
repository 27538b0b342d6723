"""Free TCP ports for test servers."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port on 127.0.0.1 the kernel just handed out and released: no other server holds it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_port_on(host, first: int, step: int = 1) -> int:
    """The first port from `first` (every `step`-th, 1000 ports at most) that `host.port_is_free`
    calls free: the host's own probe, so it also works through an SSH host."""
    return next(p for p in range(first, first + 1000, step) if host.port_is_free(p))
