"""Server-sent-events framing: turn arbitrary byte reads into `data:` payloads."""

from __future__ import annotations


class SseDataDecoder:
    """Incremental decoder: feed it bytes as they arrive, get back complete `data:` payloads.

    TCP reads split lines anywhere (even inside a UTF-8 character), so bytes are buffered until a
    newline and decoded per line. Comments (`: ping`), `event:`/`id:` fields and blank lines are
    skipped. OpenAI-style servers put one JSON document per data line, so each data line is one
    payload (multi-line events are not joined).
    """

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> list[str]:
        lines = (self._pending + data).split(b"\n")
        self._pending = lines.pop()  # the unterminated tail, maybe empty
        return [p for p in map(_data_payload, lines) if p is not None]

    def flush(self) -> list[str]:
        """Payload of a final line the server sent without a trailing newline, if any."""
        tail, self._pending = self._pending, b""
        payload = _data_payload(tail)
        return [] if payload is None else [payload]


def _data_payload(line: bytes) -> str | None:
    text = line.decode("utf-8", errors="replace").strip()
    if not text.startswith("data:"):
        return None
    return text[len("data:") :].strip()
