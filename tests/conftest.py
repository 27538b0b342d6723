"""Fixtures every tier uses. Tests never read the user's ~/.ssh/config or real environment knobs.
The code behind them is in tests/support/."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.env import isolate
from tests.support.pg import NoPostgres, PgCluster, start_cluster
from tests.support.sshd import SshServer, sshd_installed, start_sshd


# A run started in the background of a non-interactive shell (`make test &`, nohup) inherits SIGINT
# ignored, and so would every CLI the tests start: their Ctrl-C tests would time out. Handled
# here, it is back to the default in each child after exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


LOST_GROUP = ("--dist loadgroup ran this xdist_group's tests apart: this pytest and pytest-xdist drop the "
              "group (pytest-xdist #1386, pytest 9.2 with xdist 3.8; pyproject.toml pins pytest below 9.2)")


@pytest.fixture(autouse=True)
def kept_in_its_xdist_group(request):
    """Fail a grouped test that --dist loadgroup did not group (pytest-xdist adds the group to its
    node id): with the group silently dropped, each worker built the shared module fixtures again
    (the llama.cpp campaign twice, 466 s of worker time; bench/test_suite.md)."""
    if getattr(request.config.option, "loadgroup", False) and request.node.get_closest_marker("xdist_group") \
            and "@" not in request.node.nodeid:
        pytest.fail(LOST_GROUP, pytrace=False)


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory, monkeypatch):
    """Keep the user's home (ssh config, caches) and NCCL/SGLang knobs out of tests."""
    return isolate(monkeypatch, tmp_path_factory.mktemp("home"))


@pytest.fixture
def python_exe() -> str:
    return sys.executable


@pytest.fixture(scope="session")
def sshd(tmp_path_factory) -> SshServer:
    """The real OpenSSH server (tests/support/sshd.py), one for the session."""
    if not sshd_installed():
        pytest.skip("OpenSSH server not installed (make test-deps installs it)")
    server, proc = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    proc.terminate()  # by its own pid, never by name
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def ssh_home(sshd, isolated_home, monkeypatch) -> Path:
    """A home that trusts the test sshd's host key, without ssh-agent."""
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    sshd.trust(isolated_home)
    return isolated_home


@pytest.fixture(scope="session")
def pg_cluster() -> PgCluster:
    """A private PostgreSQL cluster (tests/support/pg.py), one for the session."""
    pytest.importorskip("psycopg", reason="pip install -e '.[test]' installs psycopg")
    try:
        cluster = start_cluster()
    except NoPostgres as exc:
        pytest.skip(str(exc))
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_url(pg_cluster) -> str:
    """A fresh, empty database of the session's cluster."""
    return pg_cluster.create_database()
