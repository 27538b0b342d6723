"""Control-plane HTTP (the correctness gate, profiler start/stop) through `requests`, never through
an environment proxy: every server sweeper talks to is one it launched, reached on loopback or an
SSH forward, so HTTP(S)_PROXY would only reroute (or break) those requests. The load client (http1.py)
connects directly too: one rule for every request sweeper sends."""

from __future__ import annotations

from typing import Any

import requests


def post_direct(url: str, body: dict[str, Any] | None, timeout_s: float) -> requests.Response:
    with requests.Session() as session:
        session.trust_env = False  # no proxies, .netrc or CA bundle from the environment
        return session.post(url, json=body, timeout=timeout_s)
