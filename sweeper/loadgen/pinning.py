"""The load client on a core of its own, for a run measured again because the client itself
spoiled it (lag, turnaround): this thread (the event loop's) goes to the last allowed core and,
where the server runs on this machine (transport local, its process group known), every thread
of that group to the other cores. Restored afterwards. Over SSH with the load on the controller
the two are on different machines already; with the load on the host (load_from: host) the host
runs its own python and nothing is pinned (docs/measurement.md "Precision-driven levels").

Below MIN_CORES nothing is pinned: the server's share would be what changed, not the client's
interference. On this 2-core VM a llama-server with `-t 2` squeezed onto one core streamed 2 tok/s
at C=4 where it had streamed 450 (its threads spin-wait for each other), and that level read valid."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

MIN_CORES = 4  # the server keeps at least 3 of 4 cores when the client takes one


def group_threads(pgid: int, proc: Path = Path("/proc")) -> list[int]:
    """Thread ids of every process in process group `pgid` (Linux /proc)."""
    tids = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat[stat.rindex(")") + 2:].split()[2]) != pgid:
                continue
            tids.extend(int(t.name) for t in (entry / "task").iterdir())
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return tids


@contextmanager
def client_apart(server_pgid: int | None = None, min_cores: int = MIN_CORES) -> Iterator[str]:
    """Pin as above for the duration; yields what was done (a note for the level record), "" where
    the host allows nothing (fewer than min_cores, no sched_setaffinity)."""
    if not hasattr(os, "sched_setaffinity"):
        yield ""
        return
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < max(2, min_cores):
        yield ""
        return
    client_core, rest = allowed[-1], set(allowed[:-1])
    saved: dict[int, set[int]] = {0: set(allowed)}
    os.sched_setaffinity(0, {client_core})
    pinned_server = 0
    for tid in group_threads(server_pgid) if server_pgid else []:
        try:
            saved[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, rest & saved[tid] or rest)
            pinned_server += 1
        except OSError:
            saved.pop(tid, None)
    try:
        yield (f"client pinned to core {client_core}"
               + (f", the server's {pinned_server} threads to cores {min(rest)}-{max(rest)}" if pinned_server else ""))
    finally:
        for tid, cores in saved.items():
            try:
                os.sched_setaffinity(tid, cores)
            except OSError:
                pass  # a server thread that ended
