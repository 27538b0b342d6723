"""A user who installs the package and runs it from any folder: no checkout, no hosts.yaml."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT
# one worker runs this module: its wheel is built once, in the checkout (two builds at once would
# share its build/ folder) (xdist --dist loadgroup)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("works_anywhere")]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    """The package built as a wheel and installed alone into a folder (its dependencies come from
    this interpreter's site-packages): what `pip install sweeper` puts on a machine."""
    work = tmp_path_factory.mktemp("install")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(ROOT),
                    "-w", str(work / "wheel")], check=True, timeout=300)
    wheel = next((work / "wheel").glob("sweeper-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(work / "site"),
                    str(wheel)], check=True, timeout=300)
    return {**os.environ, "PYTHONPATH": str(work / "site")}


def sweeper(env: dict, cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweeper.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_the_installed_package_is_the_one_that_runs(installed, tmp_path):
    found = subprocess.run([sys.executable, "-c", "import sweeper; print(sweeper.__file__)"], cwd=tmp_path,
                           env=installed, capture_output=True, text=True, check=True).stdout
    assert found.startswith(installed["PYTHONPATH"])


def test_version(installed, tmp_path):
    result = sweeper(installed, tmp_path, "--version")
    assert result.returncode == 0 and result.stdout.strip() == "sweeper 0.1.0"


def test_the_demo_sweeps_the_simulator_from_an_empty_folder(installed, tmp_path):
    assert not (tmp_path / "hosts.yaml").exists()
    result = sweeper(installed, tmp_path, "demo", "--trials", "2")
    assert result.returncode == 0, result.stderr
    studies = list((tmp_path / "results").iterdir())
    assert len(studies) == 1 and (studies[0] / "study.db").is_file()
    assert "study demo-sim-" in result.stdout and "tok/s" in result.stdout
    # every command that takes --storage reads $SWEEPER_STORAGE
    env = {**installed, "SWEEPER_STORAGE": f"sqlite:///{studies[0] / 'study.db'}"}
    shown = sweeper(env, tmp_path / "results", "show", studies[0].name)
    assert shown.returncode == 0 and "COMPLETE" in shown.stdout, shown.stderr


def test_an_explicit_hosts_file_that_is_missing_is_still_an_error(installed, tmp_path):
    (tmp_path / "space.yaml").write_text((ROOT / "search_spaces" / "demo-sim.yaml").read_text())
    result = sweeper(installed, tmp_path, "sweep", "space.yaml", "--hosts", "mine.yaml")
    assert result.returncode == 2 and "mine.yaml: <top>: file not found" in result.stderr, result.stderr
    assert not (tmp_path / "results").exists()
