"""A machine over SSH (paramiko, imported only here and in ssh_config.py), behind the Host protocol.

- Connection: where and how from ssh_config.py (hosts.yaml over ~/.ssh/config: HostName, User, Port,
  IdentityFile, IdentitiesOnly, ProxyCommand, ProxyJump, known-hosts files), a key file or
  ssh-agent, keepalive, connect timeout; after a drop, reconnects with backoff and remembers the
  drop (take_disruption) so the trial that saw it is retried, never recorded half-done.
- Host keys: verified against the UserKnownHostsFile(s) (default ~/.ssh/known_hosts), the
  GlobalKnownHostsFile(s) (default /etc/ssh/ssh_known_hosts) and ~/.sweeper/known_hosts. An unknown key is
  refused with its SHA256 fingerprint and how to trust it; `host_key_policy: accept-new` records it
  in ~/.sweeper/known_hosts. A changed key is always refused.
- Every operation on the host runs the agent (agent.py, the same code LocalHost calls in process)
  with a JSON request on stdin: no value of a request is ever part of a shell command line.
- Servers are reached through a local port forward (direct-tcpip), or directly (`forward: false`).
- The server log is mirrored incrementally into the local trial folder.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import shlex
import socket
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import paramiko

from sweeper.spec.hosts import HostSpec
from sweeper.errors import InfraError, UserError
from sweeper.hosts.agent import TOKEN_VAR, build_agent_source
from sweeper.hosts.base import AgentHost, CommandResult, LaunchIntent, ServerProcess, StopReport
from sweeper.hosts.forward import LocalForward
from sweeper.hosts.launch_script import build_env_json, build_launch_script, build_remote_run_dir
from sweeper.hosts.ssh_config import Target, read_ssh_config, resolve_target
from sweeper.hosts.ssh_proxy import ShellProxyCommand

logging.getLogger("paramiko").addHandler(logging.NullHandler())  # failures reach the user as one line
log = logging.getLogger(__name__)  # connects, reconnects, port forwards: what --verbose shows

SWEEPER_KNOWN_HOSTS = "~/.sweeper/known_hosts"


class SSHConnectError(UserError):
    """The host cannot be reached or refuses us; `transient` ones are worth a reconnect attempt."""

    def __init__(self, message: str, transient: bool):
        super().__init__(message)
        self.transient = transient


class UnknownHostKey(SSHConnectError):
    def __init__(self, message: str):
        super().__init__(message, transient=False)


def fingerprint(key: paramiko.PKey) -> str:
    """SHA256 fingerprint as OpenSSH prints it: SHA256:<base64 without padding>."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


class RefuseOrRecordNewKeys(paramiko.MissingHostKeyPolicy):
    """Never accepts silently: refuses an unknown key with its fingerprint, or (accept-new) records
    it in the sweeper-owned known_hosts file."""

    def __init__(self, host_name: str, target: Target, accept_new: bool, known_hosts: Path):
        self.host_name, self.target, self.accept_new, self.known_hosts = host_name, target, accept_new, known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if self.accept_new:
            self.known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with open(self.known_hosts, "a") as out:
                out.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
            client.get_host_keys().add(hostname, key.get_name(), key)
            return
        t = self.target
        known_hosts = _home_relative(t.known_hosts[0]) if t.known_hosts else "~/.ssh/known_hosts"
        if t.proxied:  # ssh-keyscan cannot go through the proxy; ssh itself asks
            how = f"log in once with `ssh {shlex.quote(t.alias)}` (it asks you to accept the key)"
        else:
            how = f"trust it with `{shlex.join(['ssh-keyscan', '-p', str(t.port), t.hostname])} >> {known_hosts}`"
        raise UnknownHostKey(
            f"host {self.host_name!r} ({t.hostname}:{t.port}) is not in known_hosts: its {key.get_name()} key "
            f"is {fingerprint(key)}. If that is the host's fingerprint, {how} "
            "or set `host_key_policy: accept-new` for this host")


def _home_relative(path: str) -> str:
    home = os.path.expanduser("~")
    return "~" + path[len(home):] if path.startswith(home + "/") else path


def _close(client: paramiko.SSHClient, sock: Any) -> None:
    client.close()
    if isinstance(sock, ShellProxyCommand):  # also when the transport never started
        sock.close()


def _describe(exc: BaseException) -> tuple[str, bool]:
    """A connection failure in a few words, and whether retrying can help."""
    if isinstance(exc, paramiko.BadHostKeyException):
        return (f"the host key changed: got {fingerprint(exc.key)}, known_hosts has "
                f"{fingerprint(exc.expected_key)}; refusing (a reinstalled host or a man in the middle)", False)
    if isinstance(exc, paramiko.AuthenticationException):
        return f"authentication failed ({exc})", False
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out", True
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        causes = list(exc.errors.values())
        exc = causes[0] if causes else exc
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (nothing listens on that port)", True
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the address ({exc.strerror})", False
    if isinstance(exc, paramiko.SSHException) and "banner" in str(exc).lower():
        return "no SSH banner (timed out)", True
    return f"{type(exc).__name__}: {exc}", True


# ---------------------------------------------------------------- the host

class SSHHost(AgentHost):
    def __init__(self, name: str, spec: HostSpec):
        self.name, self.spec = name, spec
        self.target = self._resolve(spec.address or name, spec.port, spec.user, spec.identity_file)
        self._lock = threading.RLock()
        self._clients: list[paramiko.SSHClient] = []  # [jump hosts..., target]
        self._disruption: str | None = None
        self._forwards: dict[int, LocalForward] = {}
        self._mirrors: dict[tuple[int, int], list] = {}  # (pid, start) -> [local path, remote offset]
        self._status_cache: tuple[tuple[int, int], float, dict] | None = None
        self._agent_command = shlex.join([self.python(), "-S", "-c", build_agent_source()])
        for key_file in self.target.key_files:
            if self.spec.identity_file and not os.path.isfile(key_file):
                raise UserError(f"host {name!r}: identity file {key_file} not found")
        self._connect_now()

    # ---- connection ----

    def _resolve(self, alias: str, port: int | None, user: str | None, identity_file: str | None) -> Target:
        try:
            return resolve_target(alias, read_ssh_config(alias, self.spec.ssh_config), port, user, identity_file)
        except UserError as exc:
            raise UserError(f"host {self.name!r}: {exc}") from None

    def _connect_client(self, target: Target, sock: Any = None) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        for path in (*target.known_hosts, *target.global_known_hosts, os.path.expanduser(SWEEPER_KNOWN_HOSTS)):
            if os.path.isfile(path):
                client.load_system_host_keys(path)
        client.set_missing_host_key_policy(RefuseOrRecordNewKeys(
            self.name, target, self.spec.host_key_policy == "accept-new",
            Path(os.path.expanduser(SWEEPER_KNOWN_HOSTS))))
        timeout = self.spec.connect_timeout_s
        started = time.monotonic()
        try:
            client.connect(target.hostname, port=target.port, username=target.user,
                           key_filename=list(target.key_files) or None,
                           look_for_keys=not target.key_files, allow_agent=not target.identities_only, sock=sock,
                           timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
                           channel_timeout=timeout)
        except UserError:
            _close(client, sock)
            raise
        except Exception as exc:  # paramiko and socket raise many kinds; _describe sorts them
            why, transient = _describe(exc)
            ended = sock.exit_reason(wait_s=0.3) if isinstance(sock, ShellProxyCommand) and transient else None
            if ended:
                why = f"ProxyCommand {ended}"
            _close(client, sock)
            if transient and time.monotonic() - started >= timeout * 0.9 and "timed out" not in why:
                why = f"timed out after {timeout:g}s ({why})"
            raise SSHConnectError(f"host {self.name!r}: cannot connect to {target.display}: {why}",
                                  transient) from None
        transport = client.get_transport()
        if self.spec.keepalive_s:
            transport.set_keepalive(int(max(self.spec.keepalive_s, 1)))
        return client

    def _jump_chain(self) -> list[Target]:
        chain, seen, jump = [], {self.target.alias}, self.target.proxy_jump
        while jump:
            hop = jump.split(",")[-1].strip()  # the last hop is nearest the target
            user, _, rest = hop.rpartition("@")
            alias, _, port = rest.partition(":")
            if alias in seen:
                raise UserError(f"host {self.name!r}: ProxyJump loop through {alias!r}")
            seen.add(alias)
            hop_target = self._resolve(alias, int(port) if port else None, user or None, None)
            chain.insert(0, hop_target)
            earlier = jump.split(",")[:-1]
            jump = ",".join(earlier) if earlier else hop_target.proxy_jump
        return chain

    def _connect_now(self) -> None:
        clients: list[paramiko.SSHClient] = []
        hops = self._jump_chain()
        try:
            for index, hop in enumerate([*hops, self.target]):
                sock = self._open_hop_channel(clients[-1], hop) if index else self._proxy_command(hop)
                clients.append(self._connect_client(hop, sock))
        except BaseException:
            for client in reversed(clients):
                client.close()
            raise
        self._clients = clients
        first = (hops or [self.target])[0]
        log.info("host %s: SSH connected to %s%s%s", self.name, self.target.display,
                 f" through {', '.join(h.display for h in hops)}" if hops else "",
                 f" (ProxyCommand {first.proxy_command})" if first.proxy_command else "")

    def _proxy_command(self, hop: Target) -> ShellProxyCommand | None:
        if not hop.proxy_command:
            return None
        try:
            return ShellProxyCommand(hop.proxy_command)
        except OSError as exc:
            raise SSHConnectError(f"host {self.name!r}: ProxyCommand of {hop.alias!r} cannot start: {exc}",
                                  False) from None

    def _open_hop_channel(self, jump: paramiko.SSHClient, hop: Target) -> Any:
        try:
            return jump.get_transport().open_channel("direct-tcpip", (hop.hostname, hop.port), ("127.0.0.1", 0),
                                                     timeout=self.spec.connect_timeout_s)
        except Exception as exc:
            why, transient = _describe(exc)
            raise SSHConnectError(f"host {self.name!r}: cannot reach {hop.display} through the jump host: {why}",
                                  transient) from None

    def _transport(self) -> paramiko.Transport:
        """The live transport; after a drop, reconnects with backoff (and records the drop)."""
        with self._lock:
            client = self._clients[-1] if self._clients else None
            transport = client.get_transport() if client else None
            if transport is not None and transport.is_active():
                return transport
            cause = transport.get_exception() if transport is not None else None
            self._reconnect("the connection dropped" + (f" ({type(cause).__name__}: {cause})" if cause else ""))
            return self._clients[-1].get_transport()

    def _reconnect(self, why: str) -> None:
        with self._lock:
            for client in self._clients:
                client.close()
            self._clients = []
            self._disruption = f"host {self.name!r}: {why}; reconnected"
            log.info("host %s: %s; reconnecting (for up to %.0fs)", self.name, why, self.spec.reconnect_timeout_s)
            started = time.monotonic()
            deadline = started + self.spec.reconnect_timeout_s
            delay = 0.25
            while True:
                try:
                    self._connect_now()
                    log.info("host %s: SSH reconnected after %.1fs", self.name, time.monotonic() - started)
                    return
                except SSHConnectError as exc:
                    if not exc.transient or time.monotonic() + delay > deadline:
                        raise UserError(f"host {self.name!r}: {why} and reconnecting failed for "
                                        f"{self.spec.reconnect_timeout_s:.0f}s: {exc}") from None
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def run(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
            timeout_s: float = 120.0) -> CommandResult:
        answer = self._agent("run", {"argv": list(argv), "env": {**self.spec.env, **(env or {})},
                                     "timeout_s": timeout_s}, timeout_s=timeout_s + 30)
        return CommandResult(tuple(argv), answer["returncode"], answer["stdout"], answer["stderr"])

    def take_disruption(self) -> str | None:
        with self._lock:
            message, self._disruption = self._disruption, None
            return message

    # ---- the agent ----

    def _agent(self, op: str, request: Mapping[str, Any], retry: bool = True, timeout_s: float = 60.0) -> dict:
        """Run one agent operation; after a dropped connection, reconnect and (if `retry`) run it again."""
        for attempt in range(2):
            transport = self._transport()
            try:
                return self._run_agent(transport, op, request, timeout_s)
            except (paramiko.SSHException, EOFError, OSError) as exc:
                if not _went_down(transport):
                    raise InfraError(f"host {self.name!r}: {op} failed: {type(exc).__name__}: {exc}") from None
                with self._lock:
                    if self._clients and self._clients[-1].get_transport() is transport:
                        self._reconnect(f"the connection dropped during {op}")
                if not retry or attempt:
                    raise InfraError(f"host {self.name!r}: the connection dropped during {op}") from None
        raise AssertionError("unreachable")

    def _run_agent(self, transport: paramiko.Transport, op: str, request: Mapping[str, Any],
                   timeout_s: float) -> dict:
        status, out, err = self._exec(transport, self._agent_command,
                                      json.dumps({**request, "op": op}).encode(), timeout_s)
        if status == 127:
            raise UserError(f"host {self.name!r}: {self.python()} not found on the host "
                            "(set `python:` for this host in hosts.yaml)")
        if status == -1:
            raise EOFError("the channel closed without an exit status")
        try:
            return json.loads(out)
        except ValueError:
            tail = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise InfraError(f"host {self.name!r}: {op} failed (exit {status}): {tail[0]}") from None

    def _exec(self, transport: paramiko.Transport, command: str, stdin: bytes,
              timeout_s: float) -> tuple[int, bytes, bytes]:
        """One command on its own channel, fed stdin: (exit status, stdout, stderr)."""
        channel = transport.open_session(timeout=self.spec.connect_timeout_s)
        try:
            channel.settimeout(timeout_s)
            channel.exec_command(command)
            channel.sendall(stdin)
            channel.shutdown_write()
            out = channel.makefile("rb").read()
            err = channel.makefile_stderr("rb").read()
            status = channel.recv_exit_status()
        finally:
            channel.close()
        return status, out, err

    def run_python(self, source: str, stdin: bytes, timeout_s: float) -> CommandResult:
        """`python -c source` with the host's python (site-packages on, unlike the agent: the
        load client uses uvloop when it is there), fed stdin. Not retried: a dropped connection is an InfraError
        (and a disruption of the trial), as during an agent operation."""
        transport = self._transport()
        argv = (self.python(), "-c", source)
        try:
            status, out, err = self._exec(transport, shlex.join(argv), stdin, timeout_s)
            if status == -1:
                raise EOFError("the channel closed without an exit status")
        except (paramiko.SSHException, EOFError, OSError) as exc:
            if _went_down(transport):
                with self._lock:
                    if self._clients and self._clients[-1].get_transport() is transport:
                        self._reconnect("the connection dropped during a run on the host")
                raise InfraError(f"host {self.name!r}: the connection dropped during a run on the host; "
                                 "reconnected") from None
            raise InfraError(f"host {self.name!r}: a run on the host failed: {type(exc).__name__}: {exc}") from None
        return CommandResult(argv[:2] + ("<program>",), status, out.decode(errors="replace"),
                             err.decode(errors="replace"))

    # ---- the Host protocol ----

    def launch_intent(self, cwd: str, token: str) -> LaunchIntent:
        return LaunchIntent(host=self.name, token=token, run_dir=build_remote_run_dir(self.spec.work_dir, cwd))

    def start_detached(self, argv: Sequence[str], env: Mapping[str, str], cwd: str,
                       log_path: str, token: str) -> ServerProcess:
        full_env = {**env, TOKEN_VAR: token}
        answer = self._agent("start", {
            "run_dir": self.launch_intent(cwd, token).run_dir,
            "script": build_launch_script(argv, full_env),
            "env_json": build_env_json(full_env),
            "env": full_env,
        }, retry=False)
        proc = ServerProcess(host=self.name, pid=answer["pid"], pgid=answer["pgid"],
                             start_ticks=answer["start_ticks"], token=token, log_path=answer["log_path"])
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        Path(log_path).write_bytes(b"")
        self._mirrors[(proc.pid, proc.start_ticks)] = [log_path, 0]
        return proc

    def _status(self, proc: ServerProcess) -> dict:
        """Whether the server runs, mirroring the next chunk of its log in the same round trip."""
        key = (proc.pid, proc.start_ticks)
        mirror = self._mirrors.get(key)
        answer = self._agent("status", {"proc": proc.to_dict(), "log_offset": mirror[1] if mirror else None})
        if mirror and "log" in answer:
            self._append_mirror(mirror, answer["log"])
        self._status_cache = (key, time.monotonic(), answer)
        return answer

    def _append_mirror(self, mirror: list, chunk: dict) -> None:
        data = base64.b64decode(chunk["data"])
        if data:
            with open(mirror[0], "ab") as out:
                out.write(data)
            mirror[1] += len(data)

    def _sync_mirror(self, proc: ServerProcess) -> None:
        mirror = self._mirrors.get((proc.pid, proc.start_ticks))
        while mirror:
            chunk = self._agent("read_log", {"path": proc.log_path, "offset": mirror[1]})
            self._append_mirror(mirror, chunk)
            if not chunk["more"]:
                return

    def is_alive(self, proc: ServerProcess) -> bool:
        cached = self._status_cache
        if cached and cached[0] == (proc.pid, proc.start_ticks) and time.monotonic() - cached[1] < 0.1:
            return cached[2]["alive"]
        return self._status(proc)["alive"]

    def stop_group(self, proc: ServerProcess, grace_s: float) -> StopReport:
        report = super().stop_group(proc, grace_s)
        try:
            self._sync_mirror(proc)  # the log up to the end, shutdown lines included
        finally:
            self._mirrors.pop((proc.pid, proc.start_ticks), None)
            self._status_cache = None
        return report

    def read_log(self, proc: ServerProcess, offset: int) -> tuple[str, int]:
        mirror = self._mirrors.get((proc.pid, proc.start_ticks))
        if mirror is None:
            chunk = self._agent("read_log", {"path": proc.log_path, "offset": offset})
            data = base64.b64decode(chunk["data"])
            return data.decode(errors="replace"), offset + len(data)
        self._status(proc)
        with open(mirror[0], "rb") as local:
            local.seek(offset)
            data = local.read()
        return data.decode(errors="replace"), offset + len(data)

    def read_bytes(self, path: str, offset: int) -> bytes:
        return base64.b64decode(self._agent("read_log", {"path": path, "offset": offset})["data"])  # 1 MiB chunks

    def base_url(self, port: int) -> str:
        if not self.spec.forward:
            return f"http://{self.target.hostname}:{port}"
        with self._lock:
            if port not in self._forwards:
                self._forwards[port] = LocalForward(self._open_forward_channel, ("127.0.0.1", port))
                log.info("host %s: port forward 127.0.0.1:%d -> %s:%d (127.0.0.1 there)", self.name,
                         self._forwards[port].port, self.target.hostname, port)
            return f"http://127.0.0.1:{self._forwards[port].port}"

    def _open_forward_channel(self, remote: tuple[str, int], peer: tuple[str, int]) -> Any:
        return self._transport().open_channel("direct-tcpip", remote, peer,
                                              timeout=self.spec.connect_timeout_s)

    def python(self) -> str:
        return self.spec.python or "python3"  # also the agent's

    def session_local_port(self) -> int:
        """Our end of the TCP connection to the host (tests find the sshd process serving us)."""
        return self._transport().sock.getsockname()[1]

    def close(self) -> None:
        with self._lock:
            for forward in self._forwards.values():
                forward.close()
            self._forwards.clear()
            for client in reversed(self._clients):
                client.close()
            self._clients = []



def _went_down(transport: paramiko.Transport, wait_s: float = 1.0) -> bool:
    """Whether the transport is dead (its reader thread may need a moment to notice the EOF)."""
    deadline = time.monotonic() + wait_s
    while transport.is_active():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True
