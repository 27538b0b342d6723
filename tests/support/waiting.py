"""Polling a condition, for tests that watch real processes and servers."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 15.0, interval: float = 0.05) -> T:
    """Call `predicate` until it returns something truthy and return that value; fail the test
    with an AssertionError once `timeout` seconds (monotonic) pass without it.

    It fails only after a call made past the deadline came back falsy, so a condition that comes
    true during the last sleep still counts. The default covers the host tests (an SSH round trip
    a call on a busy machine); the CLI tests, whose sweeps take minutes, pass their own."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"condition not reached in {timeout} s"
        time.sleep(interval)
    return value
