"""How fast `sweeper profile` copies trace files from an SSH host (Host.read_bytes, 1 MiB per agent
call), against a throwaway OpenSSH server on this machine (tests/sshd.py).

    .venv/bin/python bench/profile_fetch.py [--mib 32]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sweeper.spec.hosts import HostSpec
from sweeper.hosts.ssh import SSHHost  # noqa: E402
from sweeper.profile.fetch import fetch_traces, list_files  # noqa: E402
from tests.sshd import start_sshd  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        os.environ["HOME"] = str(root / "home")
        (root / "home").mkdir()
        (root / "sshd").mkdir()
        server, proc = start_sshd(root / "sshd")
        try:
            server.trust(root / "home")
            folder = root / "remote"
            folder.mkdir()
            (folder / "0-TP-0.trace.json.gz").write_bytes(os.urandom(args.mib * 2**20))
            host = SSHHost("box", HostSpec(**server.host_entry(root / "work")))
            started = time.perf_counter()
            fetch_traces(host, str(folder), list_files(host, str(folder)), root / "local")
            seconds = time.perf_counter() - started
            host.close()
        finally:
            proc.terminate()  # by its own pid
            proc.wait(10)
    print(f"{args.mib} MiB in {seconds:.1f} s: {args.mib * 2**20 / seconds / 1e6:.1f} MB/s")


if __name__ == "__main__":
    main()
