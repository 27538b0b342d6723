"""Hosts for the transport tests, as plain functions (a fixture or a test closes what it opens)."""

from __future__ import annotations

from pathlib import Path

from sweeper.hosts.local import LocalHost
from sweeper.hosts.ssh import SSHHost
from sweeper.spec.hosts import HostSpec
from tests.support.sshd import SshServer


def local_host() -> LocalHost:
    """This machine through the local transport."""
    return LocalHost("local", HostSpec(transport="local"))


def ssh_host(sshd: SshServer, folder: Path, **extra) -> SSHHost:
    """The test sshd as host "box", its work_dir <folder>/work; `extra` overrides hosts.yaml keys."""
    return SSHHost("box", HostSpec(**sshd.host_entry(folder / "work", **extra)))
