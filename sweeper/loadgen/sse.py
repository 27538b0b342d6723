"""Server-sent-events framing: turn arbitrary byte reads into `data:` payloads."""

from __future__ import annotations


class SseDataDecoder:
    """Incremental decoder: feed it bytes as they arrive, get back complete `data:` payloads.

    TCP reads split lines anywhere (even inside a UTF-8 character), so bytes are buffered until a
    newline and only whole lines are decoded. Comments (`: ping`), `event:`/`id:` fields and blank
    lines are skipped; `\\r\\n` line ends are accepted. OpenAI-style servers put one JSON document
    per data line, so each data line is one payload (multi-line events are not joined).

    This runs once per streamed read, so it stays one split and one comprehension: no call per
    line (that alone was the client's costliest function under cProfile).
    """

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> list[str]:
        if self._pending:
            data = self._pending + data
        lines = data.split(b"\n")
        self._pending = lines.pop()  # the unterminated tail, maybe empty
        return [line[5:].strip().decode("utf-8", "replace") for line in lines if line[:5] == b"data:"]

    def flush(self) -> list[str]:
        """Payload of a final line the server sent without a trailing newline, if any."""
        tail, self._pending = self._pending, b""
        return [tail[5:].strip().decode("utf-8", "replace")] if tail[:5] == b"data:" else []
