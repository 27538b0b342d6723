"""Sockets for the HTTP client: plain TCP, each read stamped with the kernel's receive time.

Reads are recvmsg'd with SO_TIMESTAMPNS: the time the bytes reached this machine's socket, not
the time the event loop got round to them. So the client's own wake-up (0.1-0.2 ms when it was
idle, on a VM), a busy loop, or C streams turning readable at once (a server emits a token to every
stream of its batch together) stay out of TTFT and ITL. What a client cannot keep up with still
shows, as loop lag (lag.py) and as requests sent late. Linux; elsewhere a read is stamped when
it is read.

https goes through asyncio's TLS transport instead (TlsProtocol, open_tls): the same callbacks,
each read stamped when the loop delivers it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
import sys
import time
from typing import Any, Callable

# Linux's number (Python names it from 3.12); elsewhere 35 is some other option: not set there.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else None)
READ_BYTES = 256 * 1024
_ANCILLARY = socket.CMSG_SPACE(16)  # one struct timespec

DataCallback = Callable[[bytes, float], None]  # bytes, receive time (time.perf_counter's clock)
LostCallback = Callable[["Exception | None"], None]  # None: the peer closed cleanly


def perf_stamp(ancillary: list, now_perf: float, now_real: float) -> float:
    """The receive time in perf_counter's clock: the kernel's stamp is CLOCK_REALTIME, so it is
    moved by the two clocks' offset taken at the read (never later than the read itself)."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack_from("qq", data)
            return min(sec + nsec * 1e-9 - (now_real - now_perf), now_perf)
    return now_perf


class StampedSocket:
    """A connected non-blocking socket on the loop's reader: on_data per read, on_lost once."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, on_data: DataCallback,
                 on_lost: LostCallback) -> None:
        self._loop, self._sock = loop, sock
        self._fd = sock.fileno()
        self._on_data, self._on_lost = on_data, on_lost
        self._unsent = b""
        self.closing = False
        loop.add_reader(self._fd, self._readable)

    def write(self, data: bytes) -> None:
        if self.closing:
            return
        if self._unsent:
            self._unsent += data
            return
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._lose(exc)
            return
        if sent < len(data):
            self._unsent = data[sent:]
            self._loop.add_writer(self._fd, self._writable)

    def close(self) -> None:
        """Close without a callback (the caller knows)."""
        if self.closing:
            return
        self.closing = True
        self._loop.remove_reader(self._fd)
        if self._unsent:
            self._loop.remove_writer(self._fd)
        self._sock.close()

    def _writable(self) -> None:
        try:
            sent = self._sock.send(self._unsent)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        self._unsent = self._unsent[sent:]
        if not self._unsent:
            self._loop.remove_writer(self._fd)

    def _readable(self) -> None:
        try:
            data, ancillary, _, _ = self._sock.recvmsg(READ_BYTES, _ANCILLARY)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        if not data:
            self._lose(None)
            return
        self._on_data(data, perf_stamp(ancillary, time.perf_counter(), time.time()) if ancillary
                      else time.perf_counter())

    def _lose(self, exc: Exception | None) -> None:
        if not self.closing:
            self.close()
            self._on_lost(exc)


def refuse_self_connection(sock: socket.socket) -> None:
    """Raise ConnectionRefusedError (the socket reset and closed) if it connected to itself.

    Polling a port in the ephemeral range that nothing listens on yet (a server still loading)
    can make the kernel pick that very port as the source: the socket connects to itself (TCP
    simultaneous open), and after a normal close its TIME_WAIT holds the port for a minute, so the
    server's own bind fails. A reset (SO_LINGER 0) leaves no TIME_WAIT."""
    local = sock.getsockname()
    if local == sock.getpeername():
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        raise ConnectionRefusedError(f"nothing listens on {local[0]}:{local[1]}: the socket connected to itself")


async def open_stamped(host: str, port: int, on_data: DataCallback, on_lost: LostCallback) -> StampedSocket:
    """Connect (the first address that answers) and start reading. Raises OSError."""
    loop = asyncio.get_running_loop()
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
        addresses = [(family, (host, port))]  # a literal address: no resolver thread
    except ValueError:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = [(info[0], info[4]) for info in infos]
    error: OSError = OSError(f"no address for {host}")
    for family, address in addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # Our closes leave TIME_WAITs on ephemeral ports; marked reusable, none of them can
            # keep a server from binding that port for a minute afterwards.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if SO_TIMESTAMPNS is not None:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            await loop.sock_connect(sock, address)
            refuse_self_connection(sock)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        return StampedSocket(loop, sock, on_data, on_lost)
    raise error


class TlsProtocol(asyncio.Protocol):
    """https through asyncio's TLS transport: reads are stamped when the loop delivers them (the
    kernel's stamp would be of encrypted records, not of the bytes they carry)."""

    def __init__(self, on_data: DataCallback, on_lost: LostCallback) -> None:
        self._on_data, self._on_lost = on_data, on_lost
        self._transport: asyncio.Transport | None = None

    @property
    def closing(self) -> bool:
        return self._transport is None or self._transport.is_closing()

    def write(self, data: bytes) -> None:
        self._transport.write(data)  # type: ignore[union-attr]

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._on_data(data, time.perf_counter())

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_lost(exc)


async def open_tls(host: str, port: int, ssl_context: Any, on_data: DataCallback,
                   on_lost: LostCallback) -> TlsProtocol:
    """Connect over TLS (server name checked against host) and start reading. Raises OSError."""
    _, protocol = await asyncio.get_running_loop().create_connection(
        lambda: TlsProtocol(on_data, on_lost), host, port, ssl=ssl_context, server_hostname=host)
    return protocol
