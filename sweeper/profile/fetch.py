"""Trace files from the host to the results folder: a short stdlib program run on the host lists
the folder (Host.run), and Host.read_bytes copies each file in chunks. The same code runs locally
and over SSH (where every value travels as JSON to the host agent, never on a command line)."""

from __future__ import annotations

import json
import posixpath
import time
from dataclasses import dataclass
from pathlib import Path

from sweeper.errors import UserError
from sweeper.hosts.base import Host
from sweeper.profile.trace import is_trace_file

LIST_SOURCE = """\
import json, os, sys
folder = sys.argv[1]
found = []
for root, _, names in os.walk(folder):
    for name in names:
        path = os.path.join(root, name)
        try:
            found.append([os.path.relpath(path, folder), os.path.getsize(path)])
        except OSError:
            pass
print(json.dumps(sorted(found)))
"""


@dataclass(frozen=True)
class RemoteFile:
    relpath: str
    size: int


class TraceFetchError(UserError):
    pass


def list_files(host: Host, folder: str) -> list[RemoteFile]:
    result = host.run([host.python(), "-S", "-c", LIST_SOURCE, folder], timeout_s=60)
    if result.returncode != 0:
        raise TraceFetchError(f"cannot list {folder} on {host.name}: {result.describe()}")
    return [RemoteFile(rel, size) for rel, size in json.loads(result.stdout)]


def wait_for_traces(host: Host, folder: str, timeout_s: float, settle_s: float,
                    still_alive=lambda: True) -> list[RemoteFile]:
    """The trace files once at least one exists and the listing (names and sizes) has not changed
    for `settle_s`: engines write traces after /stop_profile returns (vLLM compresses in the
    background), and a file still growing must not be copied half-written."""
    deadline = time.monotonic() + timeout_s
    last: list[RemoteFile] | None = None
    stable_since = time.monotonic()
    while True:
        listing = list_files(host, folder)
        if listing != last:
            last, stable_since = listing, time.monotonic()
        traces = [f for f in listing if is_trace_file(f.relpath)]
        if traces and time.monotonic() - stable_since >= settle_s:
            return traces
        if time.monotonic() >= deadline:
            seen = ", ".join(f"{f.relpath} ({f.size} B)" for f in listing) or "nothing"
            raise TraceFetchError(f"no complete trace in {folder} on {host.name} {timeout_s:.0f}s after "
                                  f"/stop_profile (found: {seen}); see the server log")
        if not still_alive():
            raise TraceFetchError(f"the server exited before writing its trace to {folder}; see the server log")
        time.sleep(0.5)


def fetch_file(host: Host, remote_path: str, size: int, local_path: Path) -> None:
    """Copy a finished file chunk by chunk (Host.read_bytes: 1 MiB per SSH round trip)."""
    local_path.parent.mkdir(parents=True, exist_ok=True)
    partial = local_path.with_name(local_path.name + ".part")
    with open(partial, "wb") as out:
        offset = 0
        while offset < size:
            data = host.read_bytes(remote_path, offset)
            if not data:
                raise TraceFetchError(f"{remote_path} on {host.name} ended at {offset} bytes, "
                                      f"expected {size}: it changed while being copied")
            out.write(data[: size - offset])
            offset += len(data)
    partial.replace(local_path)


def fetch_traces(host: Host, folder: str, files: list[RemoteFile], local_dir: Path) -> list[Path]:
    fetched = []
    for remote in files:
        target = local_dir / remote.relpath
        fetch_file(host, posixpath.join(folder, remote.relpath), remote.size, target)
        fetched.append(target)
    return fetched
