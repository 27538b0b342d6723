"""The README's "Tune your GPU box" walkthrough, every command of it, as a user would type it, on the
simulator: SPACE is the demo space (with a smaller budget, so the test is minutes, not an hour) and
HOST the local host, as the walkthrough says to rehearse it. A command the README names that does
not exist, an option it misspells, or a step that fails on the study the earlier steps made fails
here. The commands its prose names beside the blocks (`sweeper sweep ... --time-budget 8h`, the
search alone; `sweeper resume dsv4`) run too: the search in a folder of its own (it would create
the same study), the resume on the finished campaign (it continues at the stored phase: nothing is
launched again)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.paths import DEMO_SPACE
from tests.support.ports import worker_port
from tests.support.readme import block_commands, code_blocks, inline_commands, readme, section
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


WALKTHROUGH = "## Tune your GPU box"


def walkthrough_commands(text: str) -> list[str]:
    """The `sweeper ...` lines of the walkthrough's bash blocks, in order."""
    part = section(text, WALKTHROUGH)
    exports = [line.strip() for _, body in code_blocks(part) for line in body.splitlines()
               if line.strip().startswith("export ")]
    assert all(set(re.findall(r"(\w+)=", line)) <= {"SPACE", "HOST"} for line in exports), exports
    return block_commands(part, languages=("bash",))


def prose_commands(text: str) -> list[str]:
    """The `sweeper ...` commands the walkthrough's prose names that its bash blocks do not run."""
    blocks = walkthrough_commands(text)
    return [command for command in inline_commands(section(text, WALKTHROUGH)) if command not in blocks]


def small_demo_space(text: str, trials: int) -> str:
    """The demo space with fewer trials, its weights loaded in a modelled 10 s instead of 60 (about 1 s
    less per launch, of the walkthrough's ~35), and two of its five levels, C=1 and the objective's
    C=16 (1.4 s less of load per launch: the campaign took 97 s, `validate` 31 s with all five)."""
    space, count = re.subn(r"budget: \{trials: \d+\}", f"budget: {{trials: {trials}}}", text)
    space, loads = re.subn(r"--load-seconds: \d+", "--load-seconds: 10", space)
    space, levels = re.subn(r"concurrency: \[1, 2, 4, 8, 16\]", "concurrency: [1, 16]", space)
    assert count == loads == levels == 1
    return space


def test_the_walkthrough_names_each_step():
    commands = walkthrough_commands(readme())
    verbs = [command.split()[1] for command in commands]
    assert verbs == ["doctor", "campaign", "show", "validate", "best", "best", "report", "profile"], verbs
    # a new command in the prose must be given its place in the run below
    assert [command.split()[1] for command in prose_commands(readme())] == ["sweep", "resume"]


@pytest.mark.timeout(900)  # about 5 minutes on a busy 2-core machine, near the default 300 s
def test_every_walkthrough_command_runs_on_the_simulator(cli):
    (cli.workdir / "space.yaml").write_text(small_demo_space(DEMO_SPACE.read_text(), trials=6))
    # `sweeper` as installed: the entry point beside this interpreter (PYTHONPATH keeps the checkout's code)
    env = {**cli.env, "SPACE": "space.yaml", "HOST": "local",
           "PATH": f"{Path(sys.executable).parent}:{cli.env['PATH']}"}
    for command in walkthrough_commands(readme()):
        if "--watch" in command:
            watch = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=cli.workdir, env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
            lines: list[str] = []
            threading.Thread(target=lambda: lines.extend(watch.stdout), daemon=True).start()
            try:  # its first view, then Ctrl-C (a fixed 12 s wait before)
                wait_for(lambda: any("COMPLETE" in line for line in lines), timeout=60, interval=0.2)
            finally:
                os.killpg(watch.pid, signal.SIGINT)
            assert watch.wait(timeout=30) == 0, (command, lines, watch.stderr.read())
            continue
        result = subprocess.run(["bash", "-c", command], cwd=cli.workdir, env=env, capture_output=True,
                                text=True, timeout=900)
        assert result.returncode == 0, (command, result.stdout[-3000:], result.stderr[-3000:])
    study = cli.workdir / "results" / "dsv4"
    assert (study / "report.html").is_file() and (study / "report.md").is_file()
    script = cli.workdir / "serve-winner.sh"
    assert script.read_text().startswith("#!/usr/bin/env bash") and "exec " in script.read_text()
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0

    search_alone, resume = prose_commands(readme())
    launched = sorted((study / "trials").iterdir())
    result = subprocess.run(["bash", "-c", resume], cwd=cli.workdir, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0 and "campaign dsv4: done" in result.stdout, (resume, result.stdout, result.stderr)
    assert sorted((study / "trials").iterdir()) == launched, "a resumed finished campaign launched again"

    alone = cli.workdir / "search-alone"
    alone.mkdir()
    # a hosts.yaml naming `local` as the built-in host does, but at this worker's ports: at the built-in
    # 31000 the other worker's server took the port, and the retry came after the 1-trial budget
    # (a clean-clone run, 2026-12-06)
    (alone / "hosts.yaml").write_text(f"hosts:\n  local: {{transport: local, base_port: {worker_port(31000)}}}\n")
    (alone / "space.yaml").write_text(small_demo_space(DEMO_SPACE.read_text(), trials=1))
    result = subprocess.run(["bash", "-c", search_alone], cwd=alone, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, (search_alone, result.stdout[-3000:], result.stderr[-3000:])
    assert (alone / "results" / "dsv4" / "study.db").is_file()
