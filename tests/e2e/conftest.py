"""Fixtures for the CLI tests: a scratch folder with the shipped and tiny spaces, locally or with
the real sshd as its host (the code behind them is in tests/support/)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sweeper.models.random_gguf import write_random_gguf
from sweeper.spec import hosts as hosts_spec
from sweeper.spec.hosts import HostsFile, HostSpec
from tests.support.cli import SECRETS, Cli
from tests.support.faults import stop_servers_under
from tests.support.paths import DEMO_SPACE, ROOT
from tests.support.ports import worker_port
from tests.support.spaces import ONE_SEED_SPACE, TINY_SPACE


@pytest.fixture(autouse=True)
def builtin_host_in_worker_range(monkeypatch):
    # A folder without hosts.yaml runs on the built-in local host, base port 31000: two workers' sweeps
    # on it raced for one port, and a lost race is a port_busy trial retried (a first-hour test saw
    # 2 trials where it ran 1). In-process runs read the module's value when they load hosts.
    monkeypatch.setattr(hosts_spec, "BUILTIN_HOSTS",
                        HostsFile(hosts={"local": HostSpec(transport="local", base_port=worker_port(31000))}))


@pytest.fixture
def cli(tmp_path) -> Cli:
    # the checkout's hosts file, its base port in this xdist worker's own range
    hosts = (ROOT / "hosts.yaml").read_text()
    (tmp_path / "hosts.yaml").write_text(hosts.replace("base_port: 31000", f"base_port: {worker_port(31000)}"))
    (tmp_path / "tiny.yaml").write_text(TINY_SPACE)
    (tmp_path / "demo-sim.yaml").write_text(DEMO_SPACE.read_text())
    yield Cli(tmp_path)
    stop_servers_under(tmp_path)  # a failed test's servers would hold ports for the tests after it


@pytest.fixture
def ssh_cli(cli, sshd, ssh_home, tmp_path):
    """The CLI with one host, "box": the test sshd, its env carrying SECRETS."""
    work = tmp_path / "remote-work"
    entry = sshd.host_entry(work)
    entry["env"] = {**entry["env"], **SECRETS}
    (cli.workdir / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"box": entry}}))
    (cli.workdir / "one-seed.yaml").write_text(ONE_SEED_SPACE)
    cli.remote_work = work
    return cli


@pytest.fixture(scope="session")
def small_gguf(tmp_path_factory) -> Path:
    """8 layers x 512, f16: ~133 MB, slow enough per token (a few hundred tok/s on 2 cores) that
    the load generator is not the bottleneck and the levers show."""
    path = tmp_path_factory.mktemp("models") / "random-8x512.gguf"
    write_random_gguf(path, 8, 512, seed=0)
    return path
