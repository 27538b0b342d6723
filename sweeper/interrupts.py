"""Ctrl-C, SIGTERM and SIGHUP as KeyboardInterrupt, never raised in the middle of a storage call.

A KeyboardInterrupt raised inside SQLAlchemy's commit leaves that pooled connection's transaction
open: the SQLite file stays write-locked for the rest of the process, so the sweep's own next
writes (the trial marked interrupted, then FAIL) and Optuna's heartbeat thread wait out their busy
timeouts and fail (issue 32; bench/README.md, "study storage under load"). So a signal that comes
while the main thread is inside a storage call is held until the call has committed or rolled
back, and raised there. The storage keeps each such call short (sweeper/study/storage.py), which
bounds how long a Ctrl-C waits.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _State:
    held = 0  # storage calls under way in the main thread
    pending = False  # a signal came during one of them
    stopping = False  # an interrupt was raised: the command is ending


_STATE = _State()


def _raise_or_hold(signum, frame) -> None:
    if _STATE.held:
        _STATE.pending = True
        return
    _STATE.stopping = True
    raise KeyboardInterrupt


@contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """Within the block, each of SIGNALS raises KeyboardInterrupt in the main thread (held back
    during storage calls); one this process was started ignoring (nohup, a background job) stays
    ignored."""
    previous = {s: signal.signal(s, _raise_or_hold) for s in SIGNALS if signal.getsignal(s) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _STATE.pending = _STATE.stopping = False


@contextmanager
def held_interrupts() -> Iterator[None]:
    """Hold a signal until the block ends, then raise it. Only the main thread gets signals, so
    in any other thread (Optuna's heartbeat) this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _STATE.held += 1
    try:
        yield
    finally:
        _STATE.held -= 1
        if not _STATE.held:
            _raise_pending()


@contextmanager
def interruptible() -> Iterator[None]:
    """Undo held_interrupts for the block (a held signal is raised on entry): a trial's own code
    within Optuna's study.optimize, which holds signals everywhere else (its tell, the sampler),
    where a KeyboardInterrupt would cut its bookkeeping short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved, _STATE.held = _STATE.held, 0
    try:
        _raise_pending()
        yield
    finally:
        _STATE.held = saved


def _raise_pending() -> None:
    if _STATE.pending:
        _STATE.pending, _STATE.stopping = False, True
        raise KeyboardInterrupt


def stopping() -> bool:
    """Whether an interrupt was raised: the command is stopping its server and recording what it can."""
    return _STATE.stopping
