"""The README's "Tune your GPU box" walkthrough, every command of it, as a user would type it, on the
simulator: SPACE is the demo space (with a smaller budget, so the test is minutes, not an hour) and
HOST the local host, as the walkthrough says to rehearse it. A command the README names that does
not exist, an option it misspells, or a step that fails on the study the earlier steps made fails
here."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.paths import DEMO_SPACE, ROOT

pytestmark = pytest.mark.slow


def walkthrough_commands(readme: str) -> list[str]:
    """The `sweeper ...` lines of the bash blocks between "## Tune your GPU box" and the next
    top-level heading, in order."""
    start = readme.index("## Tune your GPU box")
    end = readme.index("\n# ", start)
    blocks = re.findall(r"```bash\n(.*?)```", readme[start:end], flags=re.S)
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    exports = [line for line in lines if line.startswith("export ")]
    assert all(set(re.findall(r"(\w+)=", line)) <= {"SPACE", "HOST"} for line in exports), exports
    return [line for line in lines if line.startswith("sweeper ")]


def small_demo_space(text: str, trials: int) -> str:
    space, count = re.subn(r"budget: \{trials: \d+\}", f"budget: {{trials: {trials}}}", text)
    assert count == 1
    return space


def test_the_walkthrough_names_each_step():
    commands = walkthrough_commands((ROOT / "README.md").read_text())
    verbs = [command.split()[1] for command in commands]
    assert verbs == ["doctor", "campaign", "show", "validate", "best", "best", "report", "profile"], verbs


def test_every_walkthrough_command_runs_on_the_simulator(cli):
    (cli.workdir / "space.yaml").write_text(small_demo_space(DEMO_SPACE.read_text(), trials=6))
    # `sweeper` as installed: the entry point beside this interpreter (PYTHONPATH keeps the checkout's code)
    env = {**cli.env, "SPACE": "space.yaml", "HOST": "local",
           "PATH": f"{Path(sys.executable).parent}:{cli.env['PATH']}"}
    for command in walkthrough_commands((ROOT / "README.md").read_text()):
        if "--watch" in command:
            watch = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=cli.workdir, env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
            time.sleep(12)  # start-up, the study read and ranked (scipy), on a busy machine
            os.killpg(watch.pid, signal.SIGINT)
            out, err = watch.communicate(timeout=30)
            assert watch.returncode == 0 and "COMPLETE" in out, (command, out, err)
            continue
        result = subprocess.run(["bash", "-c", command], cwd=cli.workdir, env=env, capture_output=True,
                                text=True, timeout=900)
        assert result.returncode == 0, (command, result.stdout[-3000:], result.stderr[-3000:])
    study = cli.workdir / "results" / "dsv4"
    assert (study / "report.html").is_file() and (study / "report.md").is_file()
    script = cli.workdir / "serve-winner.sh"
    assert script.read_text().startswith("#!/usr/bin/env bash") and "exec " in script.read_text()
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
