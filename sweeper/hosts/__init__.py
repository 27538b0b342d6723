"""Hosts by transport: one host algorithm, the transports differ in primitives only.

- base.py: the Host protocol and its records; AgentHost, the methods both transports share
- agent.py: the host half, stdlib only: group members, stop, alive, port probe, process details,
  finding the servers of launch intents by their run token
  (LocalHost calls it in process; SSHHost ships it with procfs.py and runs it on the host)
- procfs.py: reading /proc (shipped with the agent)
- local.py: the local transport: how to run a command, start a server, read its log, reach it
- ssh.py: the SSH transport, the same primitives over one connection
- ssh_config.py: where and how to connect over SSH (a hosts.yaml entry over ~/.ssh/config: Include, ...)
- ssh_proxy.py: a ProxyCommand as the connection's socket
- forward.py: the SSH port forward
- launch_script.py: the launch script written on the host
- gpu.py: nvidia-smi's answers parsed, and the gate's decisions on them (pure)
- gpu_gate.py: the GPU gate before a launch and after a stop
"""

from sweeper.spec.hosts import HostSpec
from sweeper.errors import UserError
from sweeper.hosts.base import Host, ServerProcess, StopReport
from sweeper.hosts.local import LocalHost


def open_host(name: str, spec: HostSpec) -> Host:
    if spec.transport == "local":
        return LocalHost(name, spec)
    if spec.transport == "ssh":
        # lazy for CLI start-up only: ssh.py brings paramiko, 0.07 s of the CLI's 0.9 s import (measured)
        from sweeper.hosts.ssh import SSHHost

        return SSHHost(name, spec)
    raise UserError(f"host {name!r}: transport {spec.transport!r} is not supported yet")


__all__ = ["Host", "LocalHost", "ServerProcess", "StopReport", "open_host"]
