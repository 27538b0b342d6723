"""The internal TCP ports a simulated SGLang server holds while it lives, bound where SGLang binds
them (the derivation is the controller's own: engines/sglang.py), so a port another process holds
fails the start-up with SGLang's own lines, and the controller's preflight sees them taken."""

from __future__ import annotations

import socket
from typing import Sequence

from sweeper.spec.engine_ports import sglang_internal_ports, uses_dp_attention
from sweeper.sim.logs import SimLog


class PortTaken(Exception):
    """An internal port could not be bound; the log already holds the engine's lines."""


def bind_internal_ports(argv: Sequence[str], host: str, port: int, log: SimLog) -> list[socket.socket]:
    """Listening sockets on every internal port; PortTaken (after SGLang's lines) when one is held."""
    held: list[socket.socket] = []
    for internal, what in sglang_internal_ports(argv, port).items():
        try:
            held.append(_listen(host, internal))
        except OSError:
            for sock in held:
                sock.close()
            _log_taken(argv, internal, what, log)
            raise PortTaken(internal) from None
    return held


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # as SGLang's is_port_available and ZMQ's TCP listener do: a port whose old connections sit in
    # TIME_WAIT (an ephemeral port some client used) binds
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen()
    except OSError:
        sock.close()
        raise
    return sock


def _log_taken(argv: Sequence[str], port: int, what: str, log: SimLog) -> None:
    if uses_dp_attention(argv):  # PortArgs.init_new probes each port (wait_port_available) and logs
        name = what.split(" ")[0]
        log.raw(f"Port is already in use. {name}={port}\n"
                "Traceback (most recent call last):\n"
                f"ValueError: {name} at {port} is not available in 30 seconds.")
    else:  # torch.distributed's rendezvous store on --nccl-port, in a scheduler
        log.record("Scheduler hit an exception: Traceback (most recent call last):\n"
                   "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
                   f"network address. port: {port}, useIpv6: false, code: -98, name: EADDRINUSE, "
                   "message: address already in use")
