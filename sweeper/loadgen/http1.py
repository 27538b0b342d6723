"""A lean HTTP/1.1 client on asyncio's Protocol API: the load generator's only HTTP path.

Why not aiohttp (which the client used before): its request path cost ~0.2 ms of client time
between a request's start timestamp and its bytes leaving, inside every TTFT, every response
chunk woke a coroutine, and a chunk's time was when that coroutine ran. Here a request is one
write of head and body, each read is stamped by the kernel when it arrived (sockio.py) and parsed
in the socket's read callback: no task switch per chunk (bench/README.md, "Third pass").
Standard library only, so the same module runs with any host python >= 3.9 (loadgen/onhost.py).

Scope is what OpenAI-style inference servers speak: a request with a body; responses framed by
Content-Length, chunked transfer coding or the connection's close; kept-alive connections; http
and https. No redirects, proxies, compression (none is asked for) or pipelining.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from sweeper.loadgen.sockio import StampedSocket, TlsProtocol, open_stamped, open_tls

MAX_HEAD_BYTES = 64 * 1024
MAX_LINE_BYTES = 4096  # a chunk-size or trailer line

# What Sink.body returns: go on reading; the consumer has what it needs (wait DRAIN_S at most for
# the body's end, so the connection can be kept); or stop now and drop the connection.
MORE, ENOUGH, STOP = 0, 1, 2
DRAIN_S = 1.0


class HttpError(Exception):
    """A request that got no complete response. `answered`: some byte of a response came."""

    answered = False


class ConnectError(HttpError):
    """No connection could be opened."""


class ServerDisconnected(HttpError):
    def __init__(self, message: str, answered: bool) -> None:
        super().__init__(message)
        self.answered = answered


class StaleConnection(ServerDisconnected):
    """A kept connection the server had closed before this request reached it (llama-server
    closes after every stream while advertising keep-alive): safe to send again, once."""


class ProtocolError(HttpError):
    answered = True


class Stalled(HttpError):
    answered = True


class RequestTimeout(HttpError):
    pass


class Sink(Protocol):
    """Receives one exchange: when the request was written, the response's head, then its body
    as it arrives (each read's bytes at once, with the perf_counter time they were read)."""

    def sent(self, at: float) -> None: ...

    def head(self, status: int, headers: dict[str, str]) -> None: ...

    def body(self, data: bytes, now: float) -> int: ...  # MORE, ENOUGH or STOP


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def split_url(url: str) -> tuple[Origin, str]:
    """(origin, path with query) of an http(s) URL; ValueError for anything else."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Origin(parts.scheme, parts.hostname, port), path


def build_request(method: str, origin: Origin, path: str, body: bytes, headers: dict[str, str],
                  keep_alive: bool) -> bytes:
    """The request's bytes, head and body together (one write, one segment when it fits)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {origin.host_header}", f"Content-Length: {len(body)}",
             *(f"{name}: {value}" for name, value in headers.items())]
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def parse_head(head: bytes) -> tuple[str, int, dict[str, str]]:
    """(version, status, headers with lower-case names) of a response head without its blank line."""
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise ProtocolError(f"not an HTTP/1.x response: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise ProtocolError(f"malformed header line: {line[:80]!r}")
        name = name.strip().lower()
        headers[name] = f"{headers[name]}, {value.strip()}" if name in headers else value.strip()
    return version, int(code), headers


_IDLE, _HEAD, _LENGTH, _CHUNKED, _UNTIL_CLOSE = range(5)


class _Connection:
    """One connection carrying one exchange at a time; its I/O is a sockio.StampedSocket (plain
    TCP, reads stamped by the kernel) or a sockio.TlsProtocol."""

    def __init__(self) -> None:
        self.io: StampedSocket | TlsProtocol | None = None
        self.closed = False
        self.last_read = 0.0
        self._state = _IDLE
        self._sink: Sink | None = None
        self._done: asyncio.Future | None = None
        self._buffer = b""
        self._answered = False
        self._keep = False
        self._left = 0  # body bytes left (Content-Length) or of the current chunk
        self._chunk_end = False  # the CRLF after a chunk's data is due
        self._trailers = False  # after the last chunk: trailer lines until a blank one
        self._draining = False  # the sink has its answer: only the body's end is awaited
        self._timer: asyncio.TimerHandle | None = None

    @property
    def usable(self) -> bool:
        return not self.closed and self.io is not None and not self.io.closing

    # ---------------------------------------------------------------- from the I/O

    def received(self, data: bytes, stamp: float) -> None:
        self.last_read = stamp
        if self._state == _IDLE:
            self._drop()  # bytes nobody asked for: this connection cannot be trusted again
            return
        self._answered = True
        try:
            self._feed(data, stamp)
        except Exception as exc:  # a malformed response or a failing consumer: this exchange only
            self._finish(exc if isinstance(exc, HttpError) else ProtocolError(f"{type(exc).__name__}: {exc}"),
                         keep=False)

    def lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._done is None or self._done.done():
            return
        if self._state == _UNTIL_CLOSE and exc is None:
            self._finish(None, keep=False)
            return
        reason = f": {exc}" if exc else ""
        where = "before the response ended" if self._answered else "before answering"
        self._finish(ServerDisconnected(f"server closed the connection {where}{reason}", self._answered),
                     keep=False)

    # ---------------------------------------------------------------- one exchange

    def exchange(self, request: bytes, sink: Sink, timeout_s: float | None,
                 stall_s: float | None) -> asyncio.Future:
        """Write the request; the future ends (None, or the HttpError) when the response has."""
        if not self.usable:  # closed by the server between connecting (or pooling) and now
            raise ServerDisconnected("server closed the connection before answering", answered=False)
        loop = asyncio.get_running_loop()
        self._done = done = loop.create_future()
        self._sink, self._state, self._buffer = sink, _HEAD, b""
        self._answered = self._chunk_end = self._trailers = self._draining = False
        now = time.perf_counter()
        self.last_read = now
        self._deadline = now + timeout_s if timeout_s else None
        self._stall_s = stall_s
        self._arm(now)
        sink.sent(now)
        self.io.write(request)  # type: ignore[union-attr]  (a failed write ends `done` at once)
        return done

    def _arm(self, now: float) -> None:
        due = [t for t in (self._deadline, self.last_read + self._stall_s if self._stall_s else None)
               if t is not None]
        if due:
            self._timer = asyncio.get_running_loop().call_later(max(min(due) - now, 0.0), self._watch)

    def _watch(self) -> None:
        """Timer: the whole request's deadline, or no byte for stall_s (checked lazily: a read
        only stamps last_read, and the timer re-arms itself from it)."""
        self._timer = None
        if self._done is None or self._done.done():
            return
        now = time.perf_counter()
        if self._deadline is not None and now >= self._deadline:
            self._finish(RequestTimeout("timeout"), keep=False)
        elif self._stall_s and now - self.last_read >= self._stall_s:
            self._finish(Stalled(f"no data for {self._stall_s:g} s"), keep=False)
        else:
            self._arm(now)

    def abort(self) -> None:
        """End the exchange (if any) as complete and drop the connection."""
        self._finish(None, keep=False)

    def _finish(self, error: HttpError | None, keep: bool) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._state, self._sink, self._buffer = _IDLE, None, b""
        if not keep:
            self._drop()
        done, self._done = self._done, None
        if done is not None and not done.done():
            if error is None:
                done.set_result(keep)
            else:
                done.set_exception(error)

    def _drop(self) -> None:
        self.closed = True
        if self.io is not None:
            self.io.close()

    # ---------------------------------------------------------------- parsing

    def _feed(self, data: bytes, now: float) -> None:
        if self._buffer:
            data, self._buffer = self._buffer + data, b""
        if self._state == _HEAD:
            data = self._read_head(data)
            if data is None:
                return
        if self._state == _CHUNKED:
            self._read_chunked(data, now)
        elif self._state == _LENGTH:
            piece, rest = data[:self._left], data[self._left:]
            self._left -= len(piece)
            if piece:
                self._deliver(piece, now)
            if self._state == _LENGTH and self._left == 0:
                self._finish(None, keep=self._keep and not rest)
        elif self._state == _UNTIL_CLOSE and data:
            self._deliver(data, now)

    def _read_head(self, data: bytes) -> bytes | None:
        """The body bytes after a complete head (the head consumed); None while it is incomplete."""
        while True:
            end = data.find(b"\r\n\r\n")
            if end < 0:
                if len(data) > MAX_HEAD_BYTES:
                    raise ProtocolError(f"response head longer than {MAX_HEAD_BYTES} bytes")
                self._buffer = data
                return None
            version, status, headers = parse_head(data[:end])
            data = data[end + 4:]
            if 100 <= status < 200:
                continue  # an interim response (100 Continue): the real one follows
            break
        connection = headers.get("connection", "").lower()
        self._keep = "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._state, self._left = _CHUNKED, 0
        elif "content-length" in headers:
            try:
                self._left = int(headers["content-length"])
            except ValueError:
                raise ProtocolError(f"bad Content-Length: {headers['content-length']!r}") from None
            self._state = _LENGTH
        else:
            self._state, self._keep = _UNTIL_CLOSE, False
        self._sink.head(status, headers)  # type: ignore[union-attr]
        if self._state == _LENGTH and self._left == 0:
            self._finish(None, keep=self._keep and not data)
            return None
        return data

    def _read_chunked(self, data: bytes, now: float) -> None:
        pieces = []
        pos, size = 0, len(data)
        while pos < size:
            if self._left:  # inside a chunk's data
                take = min(self._left, size - pos)
                pieces.append(data[pos:pos + take])
                pos += take
                self._left -= take
                self._chunk_end = self._left == 0
                continue
            if self._chunk_end:
                if size - pos < 2:
                    break
                if data[pos:pos + 2] != b"\r\n":
                    raise ProtocolError("chunk data not followed by CRLF")
                pos += 2
                self._chunk_end = False
                continue
            eol = data.find(b"\r\n", pos)
            if eol < 0:
                if size - pos > MAX_LINE_BYTES:
                    raise ProtocolError("chunk-size line too long")
                break
            line = data[pos:eol]
            pos = eol + 2
            if self._trailers:
                if not line:  # the blank line after the last chunk: the body has ended
                    if pieces:
                        self._deliver(b"".join(pieces), now)
                        if self._state != _CHUNKED:
                            return
                    self._finish(None, keep=self._keep and pos == size)
                    return
                continue
            try:
                self._left = int(line.split(b";", 1)[0], 16)
            except ValueError:
                raise ProtocolError(f"bad chunk-size line: {line[:40]!r}") from None
            self._trailers = self._left == 0
        self._buffer = data[pos:]
        if pieces:
            self._deliver(pieces[0] if len(pieces) == 1 else b"".join(pieces), now)

    def _deliver(self, data: bytes, now: float) -> None:
        verdict = self._sink.body(data, now)  # type: ignore[union-attr]
        if verdict == STOP:
            self._finish(None, keep=False)
        elif verdict == ENOUGH and not self._draining:
            # The answer is complete; the body's end is awaited only so the connection can be
            # kept, and a body that does not end costs the connection, not the answer.
            self._draining = True
            if self._timer is not None:
                self._timer.cancel()
            self._timer = asyncio.get_running_loop().call_later(DRAIN_S, self.abort)


class Pool:
    """Connections per origin, opened on demand and never capped (a cap would silently bound
    concurrency), kept alive between exchanges unless keep_alive is False.
    `async with Pool() as pool:` closes every connection at the end."""

    def __init__(self, keep_alive: bool = True, ssl_context: Any = None) -> None:
        self.keep_alive = keep_alive
        self._idle: dict[Origin, list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._ssl = ssl_context  # for https; None: the system's trust store, made when first needed

    async def __aenter__(self) -> Pool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        for conn in list(self._open):
            conn._drop()
        self._open.clear()
        self._idle.clear()

    async def request(self, method: str, url: str, body: bytes, sink: Sink, *,
                      headers: dict[str, str] | None = None, timeout_s: float | None = None,
                      stall_s: float | None = None, fresh: bool = False) -> None:
        """Send one request over a kept connection (or a new one: when none is idle, or `fresh`)
        and feed its response to sink. Raises HttpError subclasses, StaleConnection when a kept
        connection turned out closed before the request reached the server."""
        origin, path = split_url(url)
        deadline = time.perf_counter() + timeout_s if timeout_s else None
        conn = None if fresh else self._kept(origin)
        reused = conn is not None
        if conn is None:
            conn = await self._connect(origin, timeout_s)
        remaining = deadline - time.perf_counter() if deadline else None
        if remaining is not None and remaining <= 0:
            conn._drop()
            raise RequestTimeout("timeout")
        request = build_request(method, origin, path, body, headers or {}, self.keep_alive)
        try:
            keep = await conn.exchange(request, sink, remaining, stall_s)
        except asyncio.CancelledError:
            conn.abort()
            self._open.discard(conn)
            raise
        except ServerDisconnected as exc:
            self._open.discard(conn)
            if reused and not exc.answered:
                raise StaleConnection(str(exc), answered=False) from None
            raise
        except HttpError:
            self._open.discard(conn)
            raise
        if keep and self.keep_alive and not conn.closed:
            self._idle.setdefault(origin, []).append(conn)
        else:
            self._open.discard(conn)
            conn.abort()

    async def open(self, url: str, count: int, timeout_s: float | None = None) -> None:
        """Open connections to url's origin (at once) until `count` are idle, so that what is timed
        next does not include TCP handshakes. Raises ConnectError."""
        origin, _ = split_url(url)
        idle = self._idle.setdefault(origin, [])
        idle[:] = [conn for conn in idle if conn.usable]
        opened = await asyncio.gather(*(self._connect(origin, timeout_s) for _ in range(count - len(idle))),
                                      return_exceptions=True)
        idle.extend(conn for conn in opened if isinstance(conn, _Connection))
        failed = [exc for exc in opened if isinstance(exc, BaseException)]
        if failed:
            raise failed[0]

    def _kept(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if conn.usable:
                return conn
            self._open.discard(conn)
        return None

    async def _connect(self, origin: Origin, timeout_s: float | None) -> _Connection:
        conn = _Connection()
        try:
            conn.io = await asyncio.wait_for(self._open_io(origin, conn), timeout_s)
        except (OSError, asyncio.TimeoutError) as exc:
            detail = "timed out" if isinstance(exc, asyncio.TimeoutError) else str(exc)
            raise ConnectError(f"cannot connect to {origin.host}:{origin.port}: {detail}") from None
        self._open.add(conn)
        return conn

    async def _open_io(self, origin: Origin, conn: _Connection) -> StampedSocket | TlsProtocol:
        if origin.scheme == "http":
            return await open_stamped(origin.host, origin.port, conn.received, conn.lost)
        if self._ssl is None:
            import ssl  # only for https origins

            self._ssl = ssl.create_default_context()
        return await open_tls(origin.host, origin.port, self._ssl, conn.received, conn.lost)


class BufferSink:
    """Collects a whole response (status, headers, body up to `limit` bytes)."""

    def __init__(self, limit: int = 64 * 1024 * 1024) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self._parts: list[bytes] = []
        self._size = 0
        self._limit = limit

    def sent(self, at: float) -> None:
        pass  # a whole response is not timed

    def head(self, status: int, headers: dict[str, str]) -> None:
        self.status, self.headers = status, headers

    def body(self, data: bytes, now: float) -> int:
        self._parts.append(data)
        self._size += len(data)
        if self._size > self._limit:
            raise ProtocolError(f"response body over {self._limit} bytes")
        return MORE

    def text(self) -> str:
        return b"".join(self._parts).decode("utf-8", "replace")
