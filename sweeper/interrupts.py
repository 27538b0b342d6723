"""Ctrl-C, SIGTERM and SIGHUP as KeyboardInterrupt, never raised in the middle of a storage call.

A KeyboardInterrupt raised inside SQLAlchemy's commit leaves that pooled connection's transaction
open: the SQLite file stays write-locked for the rest of the process, so the sweep's own next
writes (the trial marked interrupted, then FAIL) and Optuna's heartbeat thread wait out their busy
timeouts and fail (issue 32; bench/README.md, "study storage under load"). So a signal that comes
while the main thread is inside a storage call is held until the call has committed or rolled
back, and raised there. The storage keeps each such call short (sweeper/study/storage.py), which
bounds how long a Ctrl-C waits.

A signal that comes while a finalizer or a weakref callback runs (a garbage collection, at any
allocation) raises its KeyboardInterrupt there, where Python prints "Exception ignored" and goes on:
the Ctrl-C was lost, and a sweep ran on through its trial (a clean-clone run, 2026-12-06: SQLAlchemy's
`_collection_gced`, twice in one run). So such a lost interrupt is sent again, a moment later.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
RESEND_S = 0.05  # after the collection that swallowed the interrupt: the next one lands in plain code


class _State:
    held = 0  # storage calls under way in the main thread
    pending = False  # a signal came during one of them
    signum: int | None = None  # the last one raised
    unraisable_hook = sys.__unraisablehook__  # the one before ours, for everything else
    stopping = False  # an interrupt was raised: the command is ending


_STATE = _State()


def _raise_or_hold(signum, frame) -> None:
    if _STATE.held:
        _STATE.pending = True
        return
    _STATE.stopping, _STATE.signum = True, signum
    raise KeyboardInterrupt


def _resend_lost(unraisable) -> None:
    """sys.unraisablehook: our KeyboardInterrupt, swallowed by a finalizer, is signalled again."""
    if issubclass(unraisable.exc_type, KeyboardInterrupt) and _STATE.signum is not None:
        threading.Timer(RESEND_S, os.kill, (os.getpid(), _STATE.signum)).start()
    else:
        _STATE.unraisable_hook(unraisable)


@contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """Within the block, each of SIGNALS raises KeyboardInterrupt in the main thread (held back
    during storage calls); one this process was started ignoring (nohup, a background job) stays
    ignored."""
    previous = {s: signal.signal(s, _raise_or_hold) for s in SIGNALS if signal.getsignal(s) is not signal.SIG_IGN}
    _STATE.unraisable_hook, sys.unraisablehook = sys.unraisablehook, _resend_lost
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        sys.unraisablehook = _STATE.unraisable_hook
        _STATE.pending = _STATE.stopping = False
        _STATE.signum = None


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
