"""sweeper's own HTTP/1.1 client (loadgen/http1.py, sockio.py) against raw socket servers that
write exactly the bytes each case needs: framing split anywhere, every way a body can end, a
server that closes at once, and reads stamped by the kernel rather than by a busy loop."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from sweeper.loadgen.client import run_closed_loop, StreamOptions
from sweeper.loadgen.oneshot import complete_once
from sweeper.loadgen.http1 import BufferSink, Pool, ProtocolError
from sweeper.loadgen.workload import build_prompt_token_ids

Handler = Callable[[socket.socket, bytes], None]  # the connection and the request's bytes


class RawServer:
    """Accepts on 127.0.0.1 and runs handler(conn, request) per request, one thread per connection."""

    def __init__(self, handler: Handler, wrap: Any = None) -> None:
        self.handler, self.wrap = handler, wrap  # wrap: an ssl.SSLContext for a TLS server
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = 0
        self.peers: list[tuple[str, int]] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            self.peers.append(conn.getpeername())
            if self.wrap is not None:
                try:
                    conn = self.wrap.wrap_socket(conn, server_side=True)
                except OSError:  # a client that refused our certificate
                    conn.close()
                    continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            self._requests(conn)
        except OSError:  # the client went away: that is what some cases are about
            pass
        finally:
            conn.close()

    def _requests(self, conn: socket.socket) -> None:
        buffer = b""
        while True:
            while b"\r\n\r\n" not in buffer:
                data = conn.recv(65536)
                if not data:
                    return
                buffer += data
            head, _, rest = buffer.partition(b"\r\n\r\n")
            length = int(next((line.split(b":")[1] for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length")), b"0"))
            while len(rest) < length:
                rest += conn.recv(65536)
            buffer = rest[length:]
            if self.handler(conn, head + b"\r\n\r\n" + rest[:length]) == "close":
                return

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def raw():
    servers: list[RawServer] = []

    def start(handler: Handler) -> RawServer:
        servers.append(RawServer(handler))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def sse_body(tokens: int, usage: bool = True) -> list[bytes]:
    events = [{"choices": [{"index": 0, "text": " t"}]} for _ in range(tokens)]
    if usage:
        events.append({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": tokens}})
    return [f"data: {json.dumps(e)}\n\n".encode() for e in events] + [b"data: [DONE]\n\n"]


def chunked(pieces: list[bytes]) -> bytes:
    return b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\nX-Trailer: y\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def run(url: str, n: int, output_len: int, concurrency: int = 1, **options):
    prompts = build_prompt_token_ids(n, 4, seed=1)
    return asyncio.run(run_closed_loop(url, "m", prompts, output_len, concurrency,
                                       options=StreamOptions(**options))).samples


def test_chunked_framing_split_at_every_byte_is_read_exactly(raw):
    """Chunk-size lines with extensions, data, CRLFs and trailers, one byte per TCP segment."""
    def dribble(conn, request):
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for byte in HEAD + chunked(sse_body(3)):
            conn.sendall(bytes([byte]))

    server = raw(dribble)
    samples = run(server.url, 2, 3, timeout_s=20)
    assert all(s.ok and s.output_tokens == s.streamed_tokens == 3 for s in samples), [s.error for s in samples]
    assert server.connections == 1  # the trailer was read to its end: the connection was kept


def test_content_length_and_read_until_close_bodies_for_one_shot_calls(raw):
    reply = json.dumps({"choices": [{"text": "hi"}], "usage": {"completion_tokens": 1}}).encode()

    def with_length(conn, request):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(reply), reply))

    def until_close(conn, request):
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + reply)
        return "close"

    for handler in (with_length, until_close):
        result = asyncio.run(complete_once(raw(handler).url, "m", "x", 1, 5.0))
        assert result.text == "hi" and result.completion_tokens == 1


def test_a_server_that_closes_at_once_fails_each_request_fast_never_by_timeout(raw):
    """The close can be read before the request is written (the race the SSH forward showed when
    the server behind it had died): the request must fail then, not wait for its timeout."""
    def hang_up(conn, request):
        return "close"

    def accept_and_close():
        listener = socket.create_server(("127.0.0.1", 0))

        def loop():
            while True:
                conn, _ = listener.accept()
                conn.shutdown(socket.SHUT_RDWR)
                conn.close()

        threading.Thread(target=loop, daemon=True).start()
        return f"http://127.0.0.1:{listener.getsockname()[1]}"

    for url in (raw(hang_up).url, accept_and_close()):
        started = time.monotonic()
        samples = run(url, 12, 4, concurrency=3, timeout_s=10)
        assert time.monotonic() - started < 5
        assert all(not s.ok and s.error.startswith("ServerDisconnected") for s in samples), samples


def test_malformed_responses_fail_the_request_with_the_reason(raw):
    cases = {
        b"SPDY/3 200 OK\r\n\r\n": "not an HTTP/1.x response",
        HEAD + b"zz\r\n": "bad chunk-size line",
        HEAD + b"3\r\nabcXY": "chunk data not followed by CRLF",
        b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n": "bad Content-Length",
    }
    for reply, reason in cases.items():
        server = raw(lambda conn, request, reply=reply: conn.sendall(reply))
        [sample] = run(server.url, 1, 2, timeout_s=5)
        assert not sample.ok and sample.error.startswith("ProtocolError") and reason in sample.error, sample.error


def test_reads_are_stamped_when_the_kernel_got_them_not_when_a_busy_loop_read_them(raw):
    """The first token leaves the server 50 ms after the request; the client's loop is blocked from
    20 ms to 300 ms. TTFT must read ~50 ms (the kernel's receive stamp), not ~300 ms."""
    def first_token_at_50ms(conn, request):
        conn.sendall(HEAD)
        time.sleep(0.05)
        conn.sendall(chunked(sse_body(1)))

    server = raw(first_token_at_50ms)

    async def blocked_loop():
        asyncio.get_running_loop().call_later(0.02, time.sleep, 0.28)
        return await run_closed_loop(server.url, "m", build_prompt_token_ids(1, 4, seed=2), 1, 1)

    [sample] = asyncio.run(blocked_loop()).samples
    assert sample.ok, sample.error
    assert 0.045 < sample.ttft < 0.15, sample.ttft
    assert sample.end - sample.start < 0.15  # [DONE] came in the same segment


def test_an_error_reply_keeps_its_message_and_a_huge_one_is_cut(raw):
    def error(conn, request):
        body = b"overloaded: " + b"x" * 200_000
        conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    [sample] = run(raw(error).url, 1, 2, timeout_s=5)
    assert not sample.ok and sample.error.startswith("HTTP 503: overloaded: xxx") and len(sample.error) < 300


def test_buffer_sink_refuses_a_body_over_its_limit(raw):
    server = raw(lambda conn, request: conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + b"y" * 5000))

    async def fetch():
        async with Pool() as pool:
            await pool.request("POST", server.url + "/x", b"{}", BufferSink(limit=1000), timeout_s=5)

    with pytest.raises(ProtocolError, match="over 1000 bytes"):
        asyncio.run(fetch())


def test_a_socket_that_connected_to_itself_is_refused_and_leaves_its_port_free():
    """Polling a port of the ephemeral range that nothing listens on can connect the poll's
    socket to itself; closed normally, its TIME_WAIT would hold the port the server is about to
    bind (a readiness poll made a test server fail with 'address already in use')."""
    from sweeper.loadgen.sockio import refuse_self_connection

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.connect(("127.0.0.1", port))  # TCP simultaneous open with itself
    assert sock.getsockname() == sock.getpeername()
    with pytest.raises(ConnectionRefusedError, match=f"nothing listens on 127.0.0.1:{port}"):
        refuse_self_connection(sock)
    with socket.socket() as server:  # no SO_REUSEADDR: any TIME_WAIT on the port would refuse this
        server.bind(("127.0.0.1", port))
        server.listen()


def test_get_status_is_none_when_nothing_listens_and_the_status_when_something_does(raw):
    from sweeper.loadgen.oneshot import get_status

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    assert get_status(f"http://127.0.0.1:{closed}/health") is None
    server = raw(lambda conn, request: conn.sendall(b"HTTP/1.1 503 Loading\r\nContent-Length: 0\r\n\r\n"))
    assert get_status(server.url + "/health") == 503


# alone: the kernel may hand the freed ephemeral port to another worker's new connection before the bind
@pytest.mark.alone
def test_the_clients_closed_connections_never_keep_a_server_off_their_ports(raw):
    """The client closes first, so each of its ephemeral ports sits in TIME_WAIT for a minute;
    a server (which binds with SO_REUSEADDR, as uvicorn, aiohttp and llama-server do) must still be
    able to bind that port: a test server in the ephemeral range once met exactly that."""
    def reply(conn, request):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    server = raw(reply)

    async def one_request():
        async with Pool() as pool:
            await pool.request("POST", server.url + "/x", b"{}", BufferSink(), timeout_s=5)

    asyncio.run(one_request())  # the pool closes its connection: our side closes first
    [(_, port)] = server.peers
    time.sleep(0.1)
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()


def test_https_through_a_real_tls_server(tmp_path):
    """A TLS server with a certificate made here (cryptography, which paramiko brings); the pool
    trusts it through ssl_context. Streams are parsed exactly as over plain TCP."""
    import datetime
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                         serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")

    def stream(conn, request):
        conn.sendall(HEAD + chunked(sse_body(4)))

    server = RawServer(stream, wrap=server_side)
    url = server.url.replace("http://127.0.0.1", "https://localhost")
    try:
        async def run_tls():
            async with Pool(ssl_context=ssl.create_default_context(cafile=str(tmp_path / "cert.pem"))) as pool:
                return await run_closed_loop(url, "m", build_prompt_token_ids(3, 4, seed=5), 4, 1, session=pool)

        samples = asyncio.run(run_tls()).samples
        assert all(s.ok and s.output_tokens == s.streamed_tokens == 4 for s in samples), [s.error for s in samples]
        assert server.connections == 1  # kept alive over TLS too

        async def untrusted():  # the system's trust store does not know this certificate
            async with Pool() as pool:
                return await run_closed_loop(url, "m", build_prompt_token_ids(1, 4, seed=6), 4, 1, session=pool)

        [sample] = asyncio.run(untrusted()).samples
        assert not sample.ok and "CERTIFICATE_VERIFY_FAILED" in sample.error, sample.error
    finally:
        server.close()
