"""Reference streaming server with exactly known token timing (raw sockets on asyncio's loop).

    python bench/refserver.py --port 32100 --ttft-ms 20 --gap-ms 5 [--max-batch B] [--cpu 1]

POST /v1/completions or /v1/chat/completions (stream: true): the first token is written TTFT after
the request arrived, then one token every GAP, until max_tokens; every write is scheduled on an
absolute deadline of the loop's monotonic clock (loop.call_at), so timing errors do not
accumulate. With --max-batch B, at most B streams are served at once and the others wait in
arrival order (FIFO) for a slot, so the queueing is known exactly: a request's TTFT is its wait plus
TTFT, its slot is busy TTFT + (max_tokens - 1) * GAP (bench/capacity_search.py computes the true
SLO capacity from that). A request's arrival is the kernel's receive stamp (RefConnection says why); a write's
time is taken right before its send. Linux only (SO_TIMESTAMPNS). Each token is one SSE event of OpenAI's shape; then the usage event and [DONE].
GET /stats returns (and resets) how late the server's own writes were: its truth is only as good
as that. GET /v1/models and /health answer for clients that probe first (guidellm).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import struct
import time

import numpy as np

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux's number; Python names it from 3.12
HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n")


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(payload: dict | str) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return _chunk(b"data: " + text.encode() + b"\n\n")


def _json_response(obj: dict) -> bytes:
    body = json.dumps(obj).encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % len(body)) + body


class Timing:
    """The nominal timing, and what the server actually did (its truth, recorded per write)."""

    def __init__(self, ttft_s: float, gap_s: float, max_batch: int | None = None) -> None:
        self.ttft_s, self.gap_s, self.max_batch = ttft_s, gap_s, max_batch
        self.busy = 0
        self.waiting: list = []  # streams due a slot, in arrival order
        self.lateness_s: list[float] = []
        self.ttfts_s: list[float] = []  # first token write - request read
        self.gaps_s: list[float] = []  # between consecutive token writes of one stream
        self.tokens = 0
        self.first_read = float("inf")
        self.last_write = 0.0

    def stats_and_reset(self) -> dict:
        def ms(values: list[float], q: float) -> float:
            return float(np.percentile(np.asarray(values or [0.0]) * 1000, q))

        stats = {
            "writes": len(self.lateness_s), "tokens": self.tokens,
            "late_median_ms": ms(self.lateness_s, 50), "late_p99_ms": ms(self.lateness_s, 99),
            "late_max_ms": ms(self.lateness_s, 100),
            "ttft_median_ms": ms(self.ttfts_s, 50), "gap_median_ms": ms(self.gaps_s, 50),
            "span_s": max(self.last_write - self.first_read, 0.0),
        }
        busy, waiting = self.busy, self.waiting
        self.__init__(self.ttft_s, self.gap_s, self.max_batch)
        self.busy, self.waiting = busy, waiting  # streams in flight keep their slots
        return stats

    def admit(self, stream: "_Stream") -> None:
        """Start the stream now if a slot is free, else queue it."""
        if self.max_batch is None or self.busy < self.max_batch:
            self.busy += 1
            stream.schedule(stream.proto.loop.time())
        else:
            self.waiting.append(stream)

    def release(self) -> None:
        """A stream ended: its slot goes to the longest-waiting open one."""
        self.busy -= 1
        while self.waiting and self.busy < (self.max_batch or 1 << 30):
            stream = self.waiting.pop(0)
            if not stream.proto.closed:
                self.busy += 1
                stream.schedule(stream.proto.loop.time())


def _arrival(ancillary: list, now_mono: float, now_real: float) -> float:
    """The kernel's receive stamp (CLOCK_REALTIME) in the loop's clock (monotonic). Written again
    rather than imported from sweeper's sockio.py: the truth shares no code with the client."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack_from("qq", data)
            return min(sec + nsec * 1e-9 - (now_real - now_mono), now_mono)
    return now_mono


class RefConnection:
    """One client connection on a non-blocking socket of the loop's reader. A request's arrival
    is the kernel's receive stamp of its last bytes (SO_TIMESTAMPNS), not when this loop got round
    to reading it: when C clients send at once, the k-th request waited in its socket while k-1
    others were parsed and answered, and that wait is the server's latency, which must be in its
    own record (the truth) as it is in the clients' TTFT."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, timing: Timing) -> None:
        self.loop, self.sock, self.timing = loop, sock, timing
        self.fd = sock.fileno()
        self.buffer = b""
        self.unsent = b""
        self.closed = False
        self.arrived = 0.0
        loop.add_reader(self.fd, self.readable)

    def readable(self) -> None:
        try:
            data, ancillary, _, _ = self.sock.recvmsg(65536, socket.CMSG_SPACE(16))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.close()
            return
        self.arrived = _arrival(ancillary, self.loop.time(), time.time())
        self.buffer += data
        self.parse()

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        if not self.unsent:
            try:
                data = data[self.sock.send(data):]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self.close()
                return
            if data:
                self.loop.add_writer(self.fd, self.writable)
        self.unsent += data

    def writable(self) -> None:
        try:
            self.unsent = self.unsent[self.sock.send(self.unsent):]
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        if not self.unsent:
            self.loop.remove_writer(self.fd)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.loop.remove_reader(self.fd)
            self.loop.remove_writer(self.fd)
            self.sock.close()

    def parse(self) -> None:
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4:end + 4 + length]
            self.buffer = self.buffer[end + 4 + length:]
            self.handle(head.split(" ", 2), body)

    def handle(self, request_line: list[str], body: bytes) -> None:
        method, path = request_line[0], request_line[1]
        if method == "GET":
            if path.startswith("/stats"):
                self.write(_json_response(self.timing.stats_and_reset()))
            else:
                self.write(_json_response({"object": "list", "data": [{"id": "ref", "object": "model"}]}))
            return
        request = json.loads(body or b"{}")
        n = int(request.get("max_tokens") or request.get("max_completion_tokens") or 16)
        chat = path.endswith("/chat/completions")
        prompt = request.get("prompt") if not chat else request["messages"][-1]["content"]
        prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        options = request.get("stream_options") or {}
        if not request.get("stream"):
            choice = {"index": 0, "finish_reason": "length"}
            text = " tok" * n
            choice |= {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
            self.write(_json_response({"choices": [choice], "usage": usage}))
            return
        self.write(HEAD)
        start = self.arrived
        self.timing.first_read = min(self.timing.first_read, start)
        stream = _Stream(self, n, chat, prompt_tokens, bool(options.get("include_usage")),
                         bool(options.get("continuous_usage_stats")))
        if self.timing.max_batch is None:
            stream.schedule(start)  # no batch limit: served from the kernel's receive stamp
        else:
            stream.arrived = start
            self.timing.admit(stream)


class _Stream:
    """The writes of one streamed response, each at start + TTFT + k * GAP."""

    def __init__(self, proto: RefConnection, n: int, chat: bool, prompt_tokens: int,
                 usage: bool, per_chunk_usage: bool) -> None:
        self.proto, self.n, self.chat = proto, n, chat
        self.prompt_tokens, self.usage, self.per_chunk_usage = prompt_tokens, usage, per_chunk_usage
        self.k = 0
        self.arrived: float | None = None  # with a batch limit: when it came, before its wait
        kind = "chat.completion.chunk" if chat else "text_completion"
        self.head = {"id": "cmpl-ref", "object": kind, "created": 0, "model": "ref"}

    def schedule(self, start: float) -> None:
        self.start = start
        self.deadline = start + self.proto.timing.ttft_s
        self.proto.loop.call_at(self.deadline, self.write_token)

    def write_token(self) -> None:
        proto = self.proto
        if proto.closed:
            if proto.timing.max_batch is not None:
                proto.timing.release()
            return
        k = self.k + 1
        last = k == self.n
        choice = {"index": 0, "finish_reason": "length" if last else None}
        choice |= {"delta": {"content": " tok"}} if self.chat else {"text": " tok", "logprobs": None}
        event = {**self.head, "choices": [choice]}
        if self.per_chunk_usage:
            event["usage"] = self._usage(k)
        data = _event(event)
        if last:
            if self.usage:
                data += _event({**self.head, "choices": [], "usage": self._usage(self.n)})
            data += _event("[DONE]") + b"0\r\n\r\n"
        now = proto.loop.time()  # stamped after the event is built, right before it is written
        timing = proto.timing
        timing.lateness_s.append(now - self.deadline)
        if self.k == 0:
            timing.ttfts_s.append(now - (self.start if self.arrived is None else self.arrived))
        else:
            timing.gaps_s.append(now - self.previous)
        self.previous = now
        timing.tokens += 1
        timing.last_write = max(timing.last_write, now)
        self.k = k
        proto.write(data)
        if last and timing.max_batch is not None:
            timing.release()
        if not last:
            self.deadline = self.start + timing.ttft_s + k * timing.gap_s
            proto.loop.call_at(self.deadline, self.write_token)

    def _usage(self, k: int) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": k,
                "total_tokens": self.prompt_tokens + k}


async def serve(port: int, timing: Timing) -> None:
    loop = asyncio.get_running_loop()
    listener = socket.create_server(("127.0.0.1", port), backlog=4096)
    listener.setblocking(False)

    def accept() -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            RefConnection(loop, sock, timing)

    loop.add_reader(listener.fileno(), accept)
    print(f"refserver listening on 127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=32100)
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--gap-ms", type=float, default=5.0)
    parser.add_argument("--max-batch", type=int, default=None, help="at most this many streams at once")
    parser.add_argument("--cpu", type=int, default=None, help="pin to this core")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    asyncio.run(serve(args.port, Timing(args.ttft_ms / 1000, args.gap_ms / 1000, args.max_batch)))


if __name__ == "__main__":
    main()
