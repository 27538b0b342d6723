"""Progress for logs: piped output gets one timestamped line per stage change and level result;
--quiet drops them; --log-file keeps them in a file."""

import re

import pytest

pytestmark = pytest.mark.slow
STAMP = r"\d\d:\d\d:\d\d "


def test_piped_output_is_a_line_per_stage_and_level(cli):
    result = cli.run("sweep", "tiny.yaml", "--study", "p", "--trials", "1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # the trial that finished (trial 0, or its retry where a busy machine's client spoiled it)
    [number] = [m.group(1) for line in lines if (m := re.match(STAMP + r"  -> trial (\d+): ", line))]
    for stage in ("preflight", "launch", "wait_ready", "check_output", "load", "stop"):
        assert any(re.fullmatch(STAMP + f"trial {number}: {stage}", line) for line in lines), stage
    levels = [line for line in lines if re.match(STAMP + rf"trial {number}: C=\d+: [\d.]+ output tok/s", line)]
    assert [re.search(r"C=(\d+)", line).group(1) for line in levels] == ["1", "4"]


def test_quiet_drops_the_lines_and_log_file_keeps_them(cli):
    result = cli.run("--quiet", "--log-file", "progress.log", "sweep", "tiny.yaml", "--study", "q", "--trials", "1")
    assert result.returncode == 0, result.stderr
    assert "trial 0: launch" not in result.stdout and "q: top" in result.stdout  # the leaderboard still prints
    logged = (cli.workdir / "progress.log").read_text().splitlines()
    assert any(re.fullmatch(STAMP + "trial 0: wait_ready", line) for line in logged)
    assert any("C=4: " in line for line in logged)
