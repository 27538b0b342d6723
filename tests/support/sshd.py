"""A real OpenSSH server for tests: throwaway host and user keys, bound to 127.0.0.1 at a free port,
started once per test session (the `sshd` fixture, tests/conftest.py) and stopped by its own pid.
The "remote" host is this machine: the simulator runs there through SSH, with an nvidia-smi
stand-in on the host's PATH."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import ROOT
from tests.support.ports import free_port, worker_port

SSHD = "/usr/sbin/sshd"


@dataclass(frozen=True)
class SshServer:
    port: int
    pid: int
    dir: Path
    host_key: Path  # private; .pub next to it
    user_key: Path  # authorized
    other_key: Path  # a valid key the server does not authorize
    bin_dir: Path  # holds the nvidia-smi stand-in
    gpu_state: Path  # the simulator's "GPU memory" bookkeeping

    def known_hosts_line(self) -> str:
        key_type, key_b64 = (self.host_key.with_suffix(".pub")).read_text().split()[:2]
        return f"[127.0.0.1]:{self.port} {key_type} {key_b64}\n"

    def trust(self, home: Path) -> None:
        """Put the host key into <home>/.ssh/known_hosts (as a user who checked it would)."""
        (home / ".ssh").mkdir(mode=0o700, exist_ok=True)
        with open(home / ".ssh" / "known_hosts", "a") as out:
            out.write(self.known_hosts_line())

    def host_env(self) -> dict[str, str]:
        return {"PATH": f"{self.bin_dir}:/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                "SWEEPER_SIM_GPU_STATE": str(self.gpu_state)}

    def host_entry(self, work_dir: Path, **extra) -> dict:
        """A hosts.yaml entry for this server."""
        return {"transport": "ssh", "address": "127.0.0.1", "port": self.port, "user": "root",
                "identity_file": str(self.user_key), "python": sys.executable, "gpus": 8,
                "work_dir": str(work_dir), "env": self.host_env(), "connect_timeout_s": 5,
                "base_port": worker_port(32000), "gpu_release_timeout_s": 30, **extra}

    def session_pids(self) -> list[int]:
        """sshd processes serving one connection each: the direct children of the listener."""
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                if int(stat[stat.rindex(")") + 2:].split()[1]) == self.pid:
                    pids.append(int(entry.name))
        return pids

    def session_serving(self, client_port: int) -> int | None:
        """The sshd session process whose TCP connection comes from our local port `client_port`."""
        wanted = _socket_inodes_of_connection(self.port, client_port)
        for pid in self.session_pids():
            fds = Path(f"/proc/{pid}/fd")
            try:
                links = {os.readlink(fd) for fd in fds.iterdir()}
            except OSError:
                continue
            if any(f"socket:[{inode}]" in links for inode in wanted):
                return pid
        return None


def _socket_inodes_of_connection(server_port: int, client_port: int) -> set[int]:
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].rsplit(":", 1)[1], 16)
        remote_port = int(fields[2].rsplit(":", 1)[1], 16)
        if local_port == server_port and remote_port == client_port:
            inodes.add(int(fields[9]))
    return inodes


def sshd_installed() -> bool:
    return os.path.exists(SSHD) and shutil.which("ssh-keygen") is not None


def _keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sweeper-test", "-f", str(path)],
                   check=True)
    return path


STAND_IN = """#!{python}
# nvidia-smi STAND-IN for tests (sweeper/sim/nvidia_smi.py): not the real tool
import os, sys
sys.path.insert(0, {root!r})
os.environ.setdefault("SWEEPER_SIM_GPU_STATE", {state!r})
from sweeper.sim.nvidia_smi import main
sys.exit(main())
"""


def install_stand_in(folder: Path) -> tuple[Path, Path]:
    """<folder>/bin/nvidia-smi (the stand-in) and <folder>/gpu-state (its bookkeeping): (bin, state)."""
    bin_dir, state = folder / "bin", folder / "gpu-state"
    bin_dir.mkdir()
    state.mkdir()
    stand_in = bin_dir / "nvidia-smi"
    stand_in.write_text(STAND_IN.format(python=sys.executable, root=str(ROOT), state=str(state)))
    stand_in.chmod(0o755)
    return bin_dir, state


def start_sshd(folder: Path) -> tuple[SshServer, subprocess.Popen]:
    host_key, user_key, other_key = (_keygen(folder / n) for n in ("host_ed25519", "user_ed25519", "other_ed25519"))
    (folder / "authorized_keys").write_text(user_key.with_suffix(".pub").read_text())
    bin_dir, state = install_stand_in(folder)
    port = free_port()
    config = folder / "sshd_config"
    config.write_text(f"""Port {port}
ListenAddress 127.0.0.1
HostKey {host_key}
PidFile {folder}/sshd.pid
AuthorizedKeysFile {folder}/authorized_keys
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
AllowTcpForwarding yes
MaxSessions 64
MaxStartups 64:30:128
LogLevel ERROR
""")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdin=subprocess.DEVNULL,
                            stdout=open(folder / "sshd.log", "ab"), stderr=subprocess.STDOUT)
    server = SshServer(port, proc.pid, folder, host_key, user_key, other_key, bin_dir, state)
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                if sock.recv(64).startswith(b"SSH-"):
                    return server, proc
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"sshd did not start: {(folder / 'sshd.log').read_text()[-500:]}")
        time.sleep(0.1)
