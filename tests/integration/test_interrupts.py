"""Ctrl-C and SIGTERM as KeyboardInterrupt (sweeper/interrupts.py), with real signals in a real process."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

# A signal that lands while a weakref callback runs, as one landed in SQLAlchemy's _collection_gced
# in the run that lost a Ctrl-C (the sweep ran on through its trial): the callback signals its own
# process and sleeps, so the handler's KeyboardInterrupt is raised inside it, where Python swallows it.
SCRIPT = """
import gc, os, sys, time, weakref
from sweeper.interrupts import signals_as_interrupt

class Node:
    pass

def signalled_inside(ref):
    os.kill(os.getpid(), int(sys.argv[1]))
    time.sleep(0.5)

with signals_as_interrupt():
    node = Node()
    node.cycle = node
    ref = weakref.ref(node, signalled_inside)
    del node
    started = time.monotonic()
    try:
        gc.collect()
        print("collected", flush=True)
        while time.monotonic() - started < 5:
            time.sleep(0.01)
        print("lost")
    except KeyboardInterrupt:
        print(f"interrupted {time.monotonic() - started:.2f} s after")
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_swallowed_by_a_finalizer_is_raised_again(signum):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(int(signum))], capture_output=True, text=True,
                          timeout=60)
    lines = done.stdout.splitlines()
    assert lines[0] == "collected"  # the first one was swallowed: the collection ended normally
    assert lines[1].startswith("interrupted"), done.stdout + done.stderr
    assert float(lines[1].split()[1]) < 2.0
    assert "Exception ignored" not in done.stderr, done.stderr
