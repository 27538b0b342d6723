"""Reading Linux /proc: process state, group, start time and environment. Pure parsing is
separated from the reads so the same rules apply to a remote host's /proc later."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcStat:
    pid: int
    state: str
    pgid: int
    start_ticks: int


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
            if stat.pgid == pgid and stat.state not in ("Z", "X"):
                members.append(stat)
    return members
