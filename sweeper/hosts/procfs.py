"""Reading Linux /proc: process state, group, start time, environment and sockets. Pure parsing is
separated from the reads; agent.py ships this file, so every host reads /proc by the same rules."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcStat:
    pid: int
    state: str
    pgid: int
    start_ticks: int

    @property
    def running(self) -> bool:
        """Not exited: a zombie (Z) or dead (X) process is gone but for its /proc entry."""
        return self.state not in ("Z", "X")


def parse_stat(text: str) -> ProcStat:
    """Parse /proc/<pid>/stat; the command name may hold spaces and parentheses."""
    pid = int(text[: text.index(" ")])
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); pgrp is field 5; starttime is field 22
    return ProcStat(pid=pid, state=fields[0], pgid=int(fields[2]), start_ticks=int(fields[19]))


def environ_has(environ: bytes, name: str, value: str) -> bool:
    return f"{name}={value}".encode() in environ.split(b"\0")


def read_stat(pid: int, proc: Path = Path("/proc")) -> ProcStat | None:
    try:
        return parse_stat((proc / str(pid) / "stat").read_text())
    except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
        return None


def read_environ(pid: int, proc: Path = Path("/proc")) -> bytes:
    try:
        return (proc / str(pid) / "environ").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return b""


def live_group_members(pgid: int, proc: Path = Path("/proc")) -> list[ProcStat]:
    """Processes (not zombies) whose process group is `pgid`."""
    members = []
    for entry in proc.iterdir():
        if entry.name.isdigit() and (stat := read_stat(int(entry.name), proc)):
            if stat.pgid == pgid and stat.running:
                members.append(stat)
    return members


def still_running(pids: list[int], pgid: int, proc: Path = Path("/proc")) -> list[int]:
    """Those of `pids` not yet gone from group `pgid`. An exiting process loses its environ (and so
    our token) before it is gone: a stop waits for the processes it signalled, not for the token."""
    return [pid for pid in pids
            if (stat := read_stat(pid, proc)) and stat.pgid == pgid and stat.running]


def process_alive(pid: int, start_ticks: int, proc: Path = Path("/proc")) -> bool:
    """Whether the process started at `start_ticks` as `pid` still runs (a reused PID does not match)."""
    stat = read_stat(pid, proc)
    return bool(stat and stat.start_ticks == start_ticks and stat.running)


def parse_listening_inodes(proc_net_tcp: str, port: int) -> set[int]:
    """Socket inodes listening on `port`, from the text of /proc/net/tcp or tcp6."""
    inodes = set()
    for line in proc_net_tcp.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
            inodes.add(int(fields[9]))
    return inodes


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[int]:
    inodes: set[int] = set()
    for name in ("tcp", "tcp6"):
        try:
            inodes |= parse_listening_inodes((proc / "net" / name).read_text(), port)
        except FileNotFoundError:
            pass
    return inodes


def socket_inodes_of(pid: int, proc: Path = Path("/proc")) -> set[int]:
    inodes = set()
    try:
        for fd in (proc / str(pid) / "fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    except (FileNotFoundError, PermissionError):
        pass
    return inodes


def read_cmdline(pid: int, proc: Path = Path("/proc")) -> str:
    """The command line as one readable string (arguments joined by spaces)."""
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return ""
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)


def environ_value(environ: bytes, name: str) -> str | None:
    prefix = f"{name}=".encode()
    for item in environ.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode(errors="replace")
    return None


def signal_server_group(pgid: int, ours: list[int], foreign: list[int], sig: int) -> None:
    """Signal a server: its whole group at once when every member is ours (no race with forks),
    else only our own pids. A foreign process is never signalled."""
    if not foreign:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass
        return
    for pid in ours:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
