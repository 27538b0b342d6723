"""A real PostgreSQL for tests: a private cluster (initdb into a temp folder) on 127.0.0.1 at a free
port, started once per test session and stopped with `pg_ctl stop` on its own data folder.

initdb refuses to run as root, so when the tests run as root the cluster belongs to an
unprivileged user (`postgres`, which the Debian package creates) and every server command runs
through `runuser`. Each test gets a database of its own (the `pg_url` fixture in tests/conftest.py)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests.support.ports import free_port

CLUSTER_USER = "postgres"


def find_pg_bin() -> Path | None:
    """The folder of initdb/pg_ctl: on PATH, or where Debian's postgresql package puts them."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(os.path.realpath(on_path)).parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


@dataclass(frozen=True)
class PgCluster:
    port: int
    data_dir: Path
    bin_dir: Path
    run_as: tuple[str, ...]  # the runuser prefix, or () when not root

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{CLUSTER_USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user={CLUSTER_USER} dbname=postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        self.pg_ctl("stop", "-m", "fast", "-w")  # by its data folder, never by process name
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)

    def pg_ctl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*self.run_as, str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), *args],
                              capture_output=True, text=True, timeout=120)


class NoPostgres(RuntimeError):
    pass


def start_cluster() -> PgCluster:
    """A running private cluster (also used by bench/parallel.py); NoPostgres when not installed."""
    bin_dir = find_pg_bin()
    if bin_dir is None:
        raise NoPostgres("PostgreSQL is not installed (make test-deps installs it)")
    root = Path(tempfile.mkdtemp(prefix="sweeper-pg-"))
    data = root / "data"
    run_as: tuple[str, ...] = ()
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam(CLUSTER_USER)  # Debian's postgresql package creates it
        except KeyError:
            raise NoPostgres(f"running as root, initdb needs an unprivileged user {CLUSTER_USER!r}; "
                             "none exists (apt-get install postgresql creates it)") from None
        os.chown(root, user.pw_uid, user.pw_gid)
        run_as = ("runuser", "-u", CLUSTER_USER, "--")
    subprocess.run([*run_as, str(bin_dir / "initdb"), "-D", str(data), "-U", CLUSTER_USER, "--auth=trust",
                    "--no-sync", "-E", "UTF8"], check=True, capture_output=True, timeout=120)
    port = free_port()
    options = (f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={root} "
               "-c fsync=off -c max_connections=200")
    cluster = PgCluster(port, data, bin_dir, run_as)
    started = cluster.pg_ctl("start", "-w", "-t", "60", "-l", str(root / "server.log"), "-o", options)
    if started.returncode != 0:
        log = (root / "server.log").read_text()[-800:] if (root / "server.log").exists() else ""
        raise RuntimeError(f"PostgreSQL did not start: {started.stderr} {log}")
    return cluster
