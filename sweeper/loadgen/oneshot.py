"""One-shot requests over the lean HTTP/1.1 client (http1.py), none streamed: a greedy completion (the
launch's correctness check), a GET, a POST, and the status of a GET (readiness polls). The load itself
goes through client.py's send loops."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from sweeper.loadgen.client import JSON_HEADERS
from sweeper.loadgen.endpoints import Api, build_request_body, endpoint_url
from sweeper.loadgen.http1 import BufferSink, HttpError, Pool, RequestTimeout, StaleConnection
from sweeper.loadgen.stream import ERROR_BODY_CHARS


class LoadgenError(Exception):
    """A completion call that gave no usable answer; status is None when no HTTP reply came."""

    def __init__(self, message: str, status: int | None = None, body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


@dataclass
class CompletionResult:
    text: str
    completion_tokens: int  # from the server's usage; -1 when the server reported none
    raw: dict


async def complete_once(
    base_url: str,
    model: str,
    prompt: str | list[int],
    max_tokens: int,
    timeout_s: float = 60.0,
    *,
    extra_body: dict | None = None,
    session: Pool | None = None,
    api: Api = "completions",
) -> CompletionResult:
    """One greedy, non-streamed completion; raises LoadgenError unless it returns usable JSON."""
    url = endpoint_url(base_url, api)
    payload = json.dumps(build_request_body(api, model, prompt, max_tokens, stream=False,
                                            extra_body=extra_body)).encode()
    pool = session or Pool()
    reply = BufferSink()
    try:
        try:
            await pool.request("POST", url, payload, reply, headers=JSON_HEADERS, timeout_s=timeout_s)
        except StaleConnection:  # a kept connection of the caller's pool: once more, fresh
            reply = BufferSink()
            await pool.request("POST", url, payload, reply, headers=JSON_HEADERS, timeout_s=timeout_s,
                               fresh=True)
    except RequestTimeout as exc:
        raise LoadgenError(f"no reply from {url} within {timeout_s:g} s") from exc
    except (HttpError, ValueError) as exc:
        raise LoadgenError(f"request to {url} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        if session is None:
            pool.close()
    body, status = reply.text(), reply.status
    if status != 200:
        raise LoadgenError(f"HTTP {status} from {url}: {body[:ERROR_BODY_CHARS]}", status, body)
    return _parse_completion(body, status, url)


def _parse_completion(body: str, status: int, url: str) -> CompletionResult:
    try:
        raw = json.loads(body)
        if "meta_info" in raw:  # SGLang /generate
            meta = raw["meta_info"] if isinstance(raw["meta_info"], dict) else {}
            tokens = meta.get("completion_tokens")
            return CompletionResult(str(raw["text"]), tokens if isinstance(tokens, int) else -1, raw)
        choice = raw["choices"][0]
        text = choice["message"]["content"] if "message" in choice else choice["text"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise LoadgenError(
            f"unusable completion from {url}: {type(exc).__name__}: {body[:ERROR_BODY_CHARS]}",
            status,
            body,
        ) from exc
    usage = raw.get("usage") or {}
    tokens = usage.get("completion_tokens")
    return CompletionResult(
        text=text if isinstance(text, str) else str(text),
        completion_tokens=tokens if isinstance(tokens, int) else -1,
        raw=raw,
    )


def complete(
    base_url: str,
    model: str,
    prompt: str | list[int],
    max_tokens: int,
    timeout_s: float = 60.0,
    *,
    extra_body: dict | None = None,
    api: Api = "completions",
) -> CompletionResult:
    """Blocking complete_once."""
    return asyncio.run(
        complete_once(base_url, model, prompt, max_tokens, timeout_s, extra_body=extra_body, api=api)
    )


def get(url: str, timeout_s: float = 5.0) -> tuple[int, str]:
    """Status and text of a GET; raises HttpError (ValueError for a URL that is not http(s))."""
    async def fetch() -> tuple[int, str]:
        reply = BufferSink(limit=16 * 1024 * 1024)
        async with Pool() as pool:
            await pool.request("GET", url, b"", reply, timeout_s=timeout_s)
        return reply.status, reply.text()

    return asyncio.run(fetch())


def post(url: str, payload: dict | None = None, timeout_s: float = 10.0) -> tuple[int, str]:
    """Status and text of a POST with a JSON body (none when payload is None); raises HttpError
    (ValueError for a URL that is not http(s))."""
    body = b"" if payload is None else json.dumps(payload).encode()

    async def send() -> tuple[int, str]:
        reply = BufferSink(limit=16 * 1024 * 1024)
        async with Pool() as pool:
            await pool.request("POST", url, body, reply, headers=JSON_HEADERS, timeout_s=timeout_s)
        return reply.status, reply.text()

    return asyncio.run(send())


def get_status(url: str, timeout_s: float = 5.0) -> int | None:
    """HTTP status of a GET, or None when nothing answers (readiness polls a port that may not
    listen yet: http1's sockets refuse a connection to themselves, which `requests` does not)."""
    try:
        return get(url, timeout_s)[0]
    except (HttpError, ValueError):
        return None
