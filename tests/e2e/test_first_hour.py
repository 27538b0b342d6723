"""A newcomer's first hour (issue 30): each failure they hit, as they hit it, in-process through
typer's CliRunner where no subprocess is what is tested."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from tests.support.in_process import invoke_in
from tests.support.paths import DEMO_SPACE, ROOT
from tests.support.ports import worker_port


def demo_space(tmp_path: Path, name: str = "space.yaml", **replace: str) -> Path:
    text = DEMO_SPACE.read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text)
    return path


# ---------------------------------------------------------------- 1. a seed value outside its choices

@pytest.mark.parametrize("command", ["doctor", "sweep"])
def test_a_seed_value_outside_its_choices_is_refused_at_load(tmp_path, command):
    demo_space(tmp_path, **{"moe_runner_backend: marlin, moe_a2a_backend: none":
                            "moe_runner_backend: marlinn, moe_a2a_backend: none"})
    result = invoke_in(tmp_path, command, "space.yaml")
    assert result.exit_code == 2, result.output
    assert ("space.yaml:35: seeds[0].params.moe_runner_backend: 'marlinn' is not one of the choices"
            in result.output and "did you mean 'marlin'?" in result.output), result.output
    assert "Traceback" not in result.output and not (tmp_path / "results").exists()


# ---------------------------------------------------------------- 2. exit codes a script can trust

PORT = worker_port(31000)  # this worker's own range: the other worker's sweeps take another
ONE_LEVER = """\
name: one
engine: sim
model: deepseek-ai/DeepSeek-V4-Flash
fixed_flags: {--time-scale: 0.01, --load-seconds: 30}
parameters:
  tp_size: {type: categorical, choices: [4, 8], flag: --tp-size}
workload: {input_len: 64, output_len: 32, concurrency: [1, 4], min_rounds: 2, warmup_rounds: 1}
budget: {trials: 2}
launch: {ready_timeout_s: 60, stall_timeout_s: 5, stop_grace_s: 5}
"""


def test_a_sweep_that_measured_nothing_exits_1_and_says_why(tmp_path):
    (tmp_path / "space.yaml").write_text(ONE_LEVER.replace("--tp-size", "--tp-sise"))
    result = invoke_in(tmp_path, "sweep", "space.yaml", "--study", "s", "--sampler", "brute")
    assert result.exit_code == 1, result.output
    assert ("sweep s: nothing measured (0 of 2 evaluations): 2 trials failed before a launch: "
            "preflight/unsupported_flag x2 (--tp-sise is not a flag of the installed engine)") in result.output


def test_a_sweep_whose_every_trial_failed_one_way_exits_1_naming_the_cause(tmp_path):
    (tmp_path / "space.yaml").write_text(ONE_LEVER.replace("fixed_flags: {", "fixed_flags: {--moe-runner-backend: triton, "))
    result = invoke_in(tmp_path, "sweep", "space.yaml", "--study", "s", "--sampler", "brute")
    assert result.exit_code == 1, result.output
    assert "sweep s: every trial failed (" in result.output and "all check_output/bad_output: prompt" in result.output


# ---------------------------------------------------------------- 3. a heartbeat when piped

def test_a_long_start_up_prints_heartbeats_when_piped(cli):
    """stdout a pipe (as under nohup or `| tee`): a silent wait_ready gets lines with its elapsed
    time and the engine's newest log line, without -v."""
    slow = ONE_LEVER.replace("--load-seconds: 30", "--load-seconds: 500").replace("[4, 8]", "[8]")
    (cli.workdir / "slow.yaml").write_text(slow)
    result = cli.run("--progress-every", "1", "sweep", "slow.yaml", "--study", "s", "--trials", "1")
    beats = [line for line in result.stdout.splitlines() if re.search(r"trial 0: wait_ready, \d+s; engine log: ", line)]
    assert len(beats) >= 2 and "Loading safetensors checkpoint shards" in "".join(beats), result.stdout


# ---------------------------------------------------------------- 4. a failed start can be rerun

def test_a_start_that_failed_before_its_first_trial_can_be_rerun_as_it_was(tmp_path):
    broken = tmp_path / "no-engine-python"  # an interpreter without the engine, as a newcomer's venv
    broken.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'aiohttp'\" >&2\nexit 1\n")
    broken.chmod(0o755)
    (tmp_path / "hosts.yaml").write_text(f"hosts:\n  local: {{transport: local, python: {broken}, base_port: {PORT}}}\n")
    # C=1 alone: what is tested is the rerun, and a C=4 level can miss its achieved concurrency on a busy machine
    (tmp_path / "space.yaml").write_text(ONE_LEVER.replace("[4, 8]", "[8]").replace("concurrency: [1, 4]", "concurrency: [1]"))
    argv = ("sweep", "space.yaml", "--study", "s", "--trials", "1")
    first = invoke_in(tmp_path, *argv)
    assert first.exit_code == 2 and "Traceback" not in first.output, first.output
    assert ("cannot read the engine's flags on local: " in first.output
            and "exited 1: ModuleNotFoundError: No module named 'aiohttp'" in first.output
            and "run the same command again" in first.output), first.output
    (tmp_path / "hosts.yaml").write_text(f"hosts:\n  local: {{transport: local, python: {sys.executable}, base_port: {PORT}}}\n")
    again = invoke_in(tmp_path, *argv)
    assert "already exists" not in again.output and "sweep s: 1 of 1 evaluations" in again.output, again.output


# ---------------------------------------------------------------- 5. no traceback on any failure path

@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_mid_start_up_prints_one_line_and_no_traceback(cli, signum):
    slow = ONE_LEVER.replace("--load-seconds: 30", "--load-seconds: 6000").replace("[4, 8]", "[8]")
    (cli.workdir / "slow.yaml").write_text(slow)
    process = cli.start("sweep", "slow.yaml", "--study", "s", "--trials", "1")
    started = cli.workdir / "results" / "s" / "trials" / "0" / "process.json"
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1)  # into wait_ready
    process.send_signal(signum)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, (out, err)
    assert err.strip().splitlines() == ["interrupted: the running server was stopped and the trial recorded. "
                                        "Continue with: sweeper resume s --results results"], err


def test_config_errors_speak_the_files_words_and_suggest_the_key_meant(tmp_path):
    (tmp_path / "space.yaml").write_text("""\
name: bad
engine: sim
parameters:
  tp_size: {type: categorcal, choices: [4, 8], flag: --tp-size}
  ep_size: {type: int, low: 1, high: 8, flag: --ep-size, stepp: 2}
workload: {input_len: 64, concurency: [1, 4]}
launch: {ready_timeout_s: abc}
""")
    result = invoke_in(tmp_path, "doctor", "space.yaml", "--host", "locl")
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        "error: space.yaml:1: model: required key missing",
        "space.yaml:4: parameters.tp_size: 'categorcal' is not a type: expected one of 'categorical', 'int', "
        "'float', 'bool' (did you mean 'categorical'?)",
        "space.yaml:5: parameters.ep_size.stepp: unknown key (did you mean 'step'?)",
        "space.yaml:6: workload.concurency: unknown key (did you mean 'concurrency'?)",
        "space.yaml:7: launch.ready_timeout_s: expected a number (got 'abc')"], result.output
    demo_space(tmp_path)
    result = invoke_in(tmp_path, "doctor", "space.yaml", "--host", "locl")
    assert result.exit_code == 2 and "hosts.locl: no such host (known: local) (did you mean 'local'?)" in result.output


# ---------------------------------------------------------------- 6. a duplicate key hides nothing

def test_a_duplicate_key_is_reported_with_the_files_other_problems(tmp_path):
    demo_space(tmp_path, **{"engine: sim\n": "engine: sim\nengine: sim\n",
                            "budget: {trials: 36}": "budget: {trials: 36, hours: 2}"})
    result = invoke_in(tmp_path, "sweep", "space.yaml")
    assert result.exit_code == 2 and not (tmp_path / "results").exists()
    lines = result.output.splitlines()
    assert lines[0].startswith("error: space.yaml:5: engine: duplicate key (first at line 4)"), lines
    assert len(lines) == 2 and "budget.hours: unknown key" in lines[1], lines


def test_doctor_gives_one_problem_line_for_one_wrong_python(tmp_path):
    (tmp_path / "hosts.yaml").write_text(f"hosts:\n  local: {{transport: local, python: /nonexistent/python, base_port: {PORT}}}\n")
    demo_space(tmp_path)
    result = invoke_in(tmp_path, "doctor", "space.yaml")
    assert result.exit_code == 1 and "Traceback" not in result.output
    problems = [line for line in result.output.splitlines() if line.startswith("problem")]
    assert problems == ["problem  python: /nonexistent/python: exited -1: FileNotFoundError: [Errno 2] No such "
                        "file or directory: '/nonexistent/python'"], result.output
    assert "skipped  engine: not checked: needs the python check above to pass" in result.output


def test_doctor_names_a_missing_engine_in_one_line(tmp_path):
    broken = tmp_path / "bare-python"  # a Python without sweeper: its importlib traceback
    broken.write_text("#!/bin/sh\ncase \"$2\" in *sys.version*) echo 3.11.0; exit 0;; esac\nprintf 'Traceback (most recent call last):\\n  File x\\n"
                      "importlib.metadata.PackageNotFoundError: No package metadata was found for sweeper\\n' >&2\n"
                      "exit 1\n")
    broken.chmod(0o755)
    (tmp_path / "hosts.yaml").write_text(f"hosts:\n  local: {{transport: local, python: {broken}, base_port: {PORT}}}\n")
    demo_space(tmp_path)
    result = invoke_in(tmp_path, "doctor", "space.yaml")
    engine = [line for line in result.output.splitlines() if "engine:" in line]
    assert engine == [f"problem  engine: sim is not installed for {broken}: exited 1: importlib.metadata."
                      "PackageNotFoundError: No package metadata was found for sweeper"], result.output
    assert "Traceback" not in result.output and "File x" not in result.output


# ---------------------------------------------------------------- 7. conventions

def test_one_study_needs_no_name_and_a_wrong_name_lists_those_there_are(tmp_path):
    (tmp_path / "space.yaml").write_text(ONE_LEVER.replace("[4, 8]", "[8]"))
    assert invoke_in(tmp_path, "sweep", "space.yaml", "--study", "only", "--trials", "1").exit_code == 0
    shown = invoke_in(tmp_path, "show")
    # (a busy machine's lagging load client is an infrastructure fault: its retry is a second trial)
    assert shown.exit_code == 0 and shown.output.startswith("study only: ") \
        and "1 of 1 evaluations spent" in shown.output, shown.output
    wrong = invoke_in(tmp_path, "best", "onyl")
    assert wrong.exit_code == 2 and "no study 'onyl' under results; studies there: only (did you mean 'only'?)" \
        in wrong.output, wrong.output
    (tmp_path / "results" / "other" ).mkdir()
    (tmp_path / "results" / "other" / "study.db").write_bytes((tmp_path / "results" / "only" / "study.db").read_bytes())
    which = invoke_in(tmp_path, "leaderboard")
    assert which.exit_code == 2 and "name the study: studies there: only, other" in which.output, which.output


def test_json_means_stdout_and_a_file_is_a_path_option(tmp_path):
    (tmp_path / "space.yaml").write_text(ONE_LEVER.replace("[4, 8]", "[8]"))
    assert invoke_in(tmp_path, "sweep", "space.yaml", "--study", "j", "--trials", "1").exit_code == 0
    result = invoke_in(tmp_path, "leaderboard", "j", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)[0]["rank"] == 1, result.output
    assert invoke_in(tmp_path, "leaderboard", "j", "--json-file", "rows.json").exit_code == 0
    assert json.loads((tmp_path / "rows.json").read_text()) == json.loads(result.stdout)
    assert invoke_in(tmp_path, "leaderboard", "j", "--json", "-").exit_code != 0 and not (tmp_path / "-").exists()


def test_shell_completion_can_be_installed(monkeypatch):
    # Typer guesses the shell from the parent processes (shellingham), which under a pytest-xdist
    # worker finds none; Typer's own test switch makes --show-completion take the shell named instead
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    result = CliRunner().invoke(app, ["--show-completion", "bash"])
    assert result.exit_code == 0 and "complete" in result.output, result.output
    assert "--install-completion" in CliRunner().invoke(app, ["--help"]).output


def into_this_workers_range(hosts: Path) -> None:
    """The base port `init` wrote (31000) moved to this worker's: a newcomer's 31000 is free, here the
    other worker's sweeps may hold it (clean-clone runs, 2026-12-06: doctor's "ports: in use on local:
    31000", in both tests that run `init`)."""
    written = hosts.read_text()
    assert "base_port: 31000 " in written
    hosts.write_text(written.replace("base_port: 31000 ", f"base_port: {PORT} ", 1))


def test_init_writes_a_space_and_hosts_that_doctor_accepts_and_never_overwrites(tmp_path):
    result = invoke_in(tmp_path, "init")
    assert result.exit_code == 0 and (tmp_path / "space.yaml").is_file() and (tmp_path / "hosts.yaml").is_file()
    into_this_workers_range(tmp_path / "hosts.yaml")
    assert invoke_in(tmp_path, "doctor", "space.yaml").exit_code == 0
    (tmp_path / "space.yaml").write_text("mine")
    again = invoke_in(tmp_path, "init", "--template", "dsv4-flash-sm12")
    assert again.exit_code == 2 and "did you mean 'dsv4-flash-sm120'?" in again.output
    again = invoke_in(tmp_path, "init", "--template", "dsv4-flash-sm120")
    assert again.exit_code == 2 and "nothing written" in again.output and (tmp_path / "space.yaml").read_text() == "mine"


def test_a_packaged_space_is_named_from_the_cli(tmp_path):
    assert invoke_in(tmp_path, "doctor", "demo").exit_code == 0
    typo = invoke_in(tmp_path, "doctor", "dmeo")
    assert typo.exit_code == 2 and "file not found (or a packaged space: demo, " in typo.output \
        and "(did you mean 'demo'?)" in typo.output


@pytest.mark.timeout(600)
def test_demo_ends_with_the_winner_and_its_distance_to_the_optimum(tmp_path):
    result = invoke_in(tmp_path, "demo", "--trials", "2")
    assert result.exit_code == 0, result.output
    tail = result.output.splitlines()[-6:]
    assert any(line.startswith("winner: trial ") for line in tail), tail
    assert any(line.startswith("the simulator's optimum (modelled, ") for line in tail), tail
    assert re.search(r"best trial \d+ measured [\d.]+, modelled [\d.]+ = [\d.]+% of the optimum", tail[-1]), tail


# ---------------------------------------------------------------- pip install of a clone, an empty folder

def copy_of_the_checkout(target: Path) -> Path:
    """The files a clone has (tracked, and new ones git does not ignore), links kept."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.split("\0")
    for name in filter(None, listed):
        source, copy = ROOT / name, target / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            copy.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, copy)
    return target


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_pip_install_of_a_clone_then_init_doctor_and_demo_in_an_empty_folder(tmp_path):
    """As a newcomer: pip install the clone into a fresh venv (offline: the dependencies come from
    this interpreter's site-packages through a .pth file, the build without isolation), then in an
    empty folder `sweeper init`, `sweeper doctor` on the written files and `sweeper demo`."""
    source = copy_of_the_checkout(tmp_path / "clone")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                                "--no-build-isolation", "--no-index", "--ignore-installed", str(source)],
                               env=env, capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr[-3000:]
    empty = tmp_path / "empty"
    empty.mkdir()
    sweeper = str(venv / "bin" / "sweeper")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sweeper, *args], cwd=empty, env=env, capture_output=True, text=True, timeout=600)

    where = subprocess.run([str(python), "-c", "import sweeper; print(sweeper.__file__)"], cwd=empty, env=env,
                           capture_output=True, text=True)
    assert where.stdout.startswith(str(site)), where  # the installed package, not the checkout
    assert run("init").returncode == 0 and {p.name for p in empty.iterdir()} == {"space.yaml", "hosts.yaml"}
    into_this_workers_range(empty / "hosts.yaml")
    doctor = run("doctor", "space.yaml")
    assert doctor.returncode == 0 and "problem" not in doctor.stdout, doctor.stdout + doctor.stderr
    demo = run("demo", "--trials", "2")
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "% of the optimum" in demo.stdout.splitlines()[-1] and (empty / "results").is_dir()
