"""A local TCP port forwarded to a port on the host: each connection accepted on 127.0.0.1:<ephemeral>
is piped through a channel that `open_channel` opens (an SSH direct-tcpip channel), by one thread.
Knows nothing of SSH itself: the channel only needs recv/sendall/close/fileno."""

from __future__ import annotations

import socket
import threading
from typing import Any, Callable

OpenChannel = Callable[[tuple[str, int], tuple[str, int]], Any]


class LocalForward:
    def __init__(self, open_channel: OpenChannel, remote: tuple[str, int]):
        self._open_channel, self.remote = open_channel, remote
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self._listener.settimeout(0.5)
        self.port = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        threading.Thread(target=self._accept_loop, name=f"forward-{self.port}", daemon=True).start()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                conn, peer = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            conn.setblocking(True)
            with self._lock:
                self._open.add(conn)
            threading.Thread(target=self._pipe, args=(conn, peer), daemon=True).start()

    def _pipe(self, conn: socket.socket, peer: tuple[str, int]) -> None:
        """Two blocking pumps, one per direction. No select() on the channel: its fileno() is a pipe
        that paramiko closes with the channel, and a late write to a reused fd number would land
        in whatever file took that number (the SSH socket itself, once seen).

        Either end finishing ends both: the client closing makes the upstream pump close the
        channel (which wakes channel.recv); the remote closing, or the channel dying with its
        transport, ends channel.recv, and conn is then shut down, not merely closed. A plain
        close() of a socket another thread is blocked in recv() on neither wakes that thread nor
        sends a FIN, so a kept-alive client would write its next request into a connection
        that nothing reads, and wait for a reply that never comes."""
        channel = None
        try:
            channel = self._open_channel(self.remote, peer)
            upstream = threading.Thread(target=_pump, args=(conn.recv, channel.sendall, channel.close),
                                        daemon=True)
            upstream.start()
            _pump(channel.recv, conn.sendall)
        except Exception:  # a closed port, a dropped connection: the client sees its socket closed
            pass
        finally:
            with self._lock:
                self._open.discard(conn)
            _shut(conn)
            for end in (channel, conn):
                try:
                    if end is not None:
                        end.close()
                except Exception:
                    pass

    def open_connections(self) -> int:
        """Client connections being piped now (tests watch them close)."""
        with self._lock:
            return len(self._open)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            for conn in list(self._open):
                _shut(conn)


def _shut(conn: socket.socket) -> None:
    """FIN to the client and EOF to any thread blocked reading conn."""
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:  # already shut, or the client reset it
        pass


def _pump(recv: Callable[[int], bytes], send: Callable[[bytes], Any],
          then: Callable[[], Any] = lambda: None) -> None:
    """Copy until end of stream or an error on either side, then call `then`."""
    try:
        while data := recv(65536):
            send(data)
    except Exception:
        pass
    try:
        then()
    except Exception:
        pass
