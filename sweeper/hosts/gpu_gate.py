"""The GPU gate: before a launch, the GPUs a trial needs must be free of other people's memory;
after a stop, they must be back to their baseline and the server's port no longer its own. Never
kills a process it did not start: servers of this study (token check) are stopped, anything else
stops the sweep."""

from __future__ import annotations

import time
from typing import Sequence

from sweeper.spec.hosts import HostSpec
from sweeper.errors import UserError
from sweeper.hosts.base import Host, ServerProcess
from sweeper.hosts.gpu import GpuHolder, GpuSnapshot, gpus_needed, holders_above, memory_not_released

POLL_S = 0.5


class GpuBusy(UserError):
    """A process that is not ours holds memory on a GPU the trial needs."""


class GpusNotReleased(UserError):
    """After a stop, GPU memory or the port did not come back in time."""


def format_holders(host_name: str, holders: Sequence[tuple[GpuHolder, str]]) -> str:
    listed = "; ".join(f"pid {h.pid} ({h.used_mib} MiB on GPU {h.gpu_index}): {cmd[:160] or '?'}"
                       for h, cmd in holders)
    return (f"host {host_name!r}: GPU memory is held by processes sweeper did not start: {listed}. "
            "They were left running: stop them yourself, or raise gpu_busy_mib for this host")


def check_gpus_before_launch(host: Host, spec: HostSpec, known: Sequence[ServerProcess],
                             grace_s: float) -> GpuSnapshot | None:
    """The baseline snapshot to compare with after the stop, or None when the host has no gate.
    Stops this study's own leftover servers; raises GpuBusy for anyone else's."""
    snapshot = host.gpu_snapshot()
    if snapshot is None:
        return None
    needed = gpus_needed(spec.gpus, snapshot, spec.env.get("CUDA_VISIBLE_DEVICES"))
    holders = holders_above(snapshot, needed, spec.gpu_busy_mib)
    if not holders:
        return snapshot
    details = host.process_details([h.pid for h in holders])
    by_token = {p.token: p for p in known}
    ours: dict[str, ServerProcess] = {}
    foreign = []
    for holder in holders:
        detail = details.get(holder.pid)
        if detail is None:
            continue  # gone meanwhile
        proc = by_token.get(detail.token or "")
        if proc is not None and proc.pgid == detail.pgid:
            ours[proc.token] = proc
        else:
            foreign.append((holder, detail.cmdline))
    if foreign:
        raise GpuBusy(format_holders(host.name, foreign))
    for proc in ours.values():
        host.stop_group(proc, grace_s)
    return _wait_holders_gone(host, spec, needed)


def _wait_holders_gone(host: Host, spec: HostSpec, needed: list[int]) -> GpuSnapshot:
    deadline = time.monotonic() + spec.gpu_release_timeout_s
    while True:
        snapshot = host.gpu_snapshot()
        holders = holders_above(snapshot, needed, spec.gpu_busy_mib)
        if not holders:
            return snapshot
        if time.monotonic() >= deadline:
            pids = ", ".join(str(h.pid) for h in holders)
            raise GpusNotReleased(f"host {host.name!r}: GPU memory of this study's old servers was not released "
                                  f"within {spec.gpu_release_timeout_s:.0f}s (pids {pids}); not launching onto a dirty GPU")
        time.sleep(POLL_S)


def wait_gpus_released(host: Host, spec: HostSpec, baseline: GpuSnapshot, proc: ServerProcess,
                       port: int) -> GpuSnapshot | None:
    """Block until the GPUs are back to `baseline` and no process of the server `proc` listens on
    `port`, and return the snapshot that showed it; stop the sweep if not in time. Another process
    on the port is not the server's leftover: once ours let the port go, a server of another GPU
    set or another tenant may take it (one not of our group held a port 40 s and the sweep
    stopped, 2026-12-06), and the next launch's preflight steps past a busy port."""
    needed = gpus_needed(spec.gpus, baseline, spec.env.get("CUDA_VISIBLE_DEVICES"))
    deadline = time.monotonic() + spec.gpu_release_timeout_s
    while True:
        snapshot = host.gpu_snapshot()
        reasons = memory_not_released(baseline, snapshot, needed, spec.gpu_busy_mib) if snapshot else []
        if host.listens_on(proc, port):
            reasons.append(f"port {port} is still held by the server's processes")
        if not reasons:
            return snapshot
        if time.monotonic() >= deadline:
            raise GpusNotReleased(
                f"host {host.name!r}: {spec.gpu_release_timeout_s:.0f}s after the server was stopped, "
                + "; ".join(reasons) + ". Stopping the sweep rather than launching onto a dirty GPU")
        time.sleep(POLL_S)
