"""Hosts by transport."""

from sweeper.spec.hosts import HostSpec
from sweeper.errors import UserError
from sweeper.hosts.base import Host, ServerProcess, StopReport


def open_host(name: str, spec: HostSpec) -> Host:
    if spec.transport == "local":
        from sweeper.hosts.local import LocalHost

        return LocalHost(name, spec)
    if spec.transport == "ssh":
        from sweeper.hosts.ssh import SSHHost

        return SSHHost(name, spec)
    raise UserError(f"host {name!r}: transport {spec.transport!r} is not supported yet")


__all__ = ["Host", "ServerProcess", "StopReport", "open_host"]
