"""The commands whose CLI modules no test ran in-process (sweeper/cli/results.py: leaderboard, show,
best, report; sim.py: sim best; init.py; validate.py; sweep.py: resume; profile.py: kernels; models
make-gguf), through typer's CliRunner in this process: what they print and write, and their exit
codes as the app returns them. How the installed entry point starts, is interrupted and ends stays
with the subprocess tests (test_sweep_cli, test_resume, test_first_hour and the others)."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from tests.support.env import isolate
from tests.support.faults import stop_servers_under
from tests.support.in_process import invoke_in
from tests.support.paths import FIXTURE_DIR, ROOT
from tests.support.ports import worker_port
from tests.support.spaces import TINY_SPACE

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("cli_in_process")]

TRACE = FIXTURE_DIR / "profile" / "h200_llama4l_probe.pt.trace.json.gz"


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A folder with one study, "s": 4 evaluations of the tiny space (the garbage seed among them),
    swept in-process; the tests that change it work on a copy."""
    workdir = tmp_path_factory.mktemp("in-process")
    hosts = (ROOT / "hosts.yaml").read_text()
    (workdir / "hosts.yaml").write_text(hosts.replace("base_port: 31000", f"base_port: {worker_port(31000)}"))
    (workdir / "tiny.yaml").write_text(TINY_SPACE)
    with pytest.MonkeyPatch.context() as patch:  # the trials' work_dir (~/.sweeper) not in the real home
        isolate(patch, tmp_path_factory.mktemp("home"))
        result = invoke_in(workdir, "sweep", "tiny.yaml", "--study", "s", "--trials", "4")
    yield workdir, result
    stop_servers_under(workdir)  # a sweep that failed half-way: its servers


def copied(swept, tmp_path):
    """A copy of the swept folder, for a test that adds to the study."""
    workdir, _ = swept
    shutil.copytree(workdir, tmp_path / "copy")
    return tmp_path / "copy"


def test_the_sweep_ends_with_its_summary_and_exit_0(swept):
    _, result = swept
    assert result.exit_code == 0, result.output
    assert "sweep s: 4 of 4 evaluations" in result.output, result.output


def test_leaderboard_show_and_best_agree_on_the_winner(swept):
    workdir, _ = swept
    board = invoke_in(workdir, "leaderboard", "s", "--csv", "board.csv")
    assert board.exit_code == 0, board.output
    frame = pd.read_csv(workdir / "board.csv")
    shown = invoke_in(workdir, "show", "s", "--json")
    assert shown.exit_code == 0, shown.output
    shown = json.loads(shown.stdout)
    assert shown["study"] == "s" and shown["evaluations"] == 4 and len(frame) == shown["trials"]
    assert "check_output/bad_output" in shown["not_ranked"]  # the garbage seed never ranks
    best = invoke_in(workdir, "best", "s", "--json")
    assert best.exit_code == 0, best.output
    best = json.loads(best.stdout)
    assert best["trial"] == shown["best"][0]["trial"] == frame.loc[frame["feasible"], "trial"].iloc[0]
    assert best["validated"] is False and best["tied_with"] is None
    script = invoke_in(workdir, "best", "s", "--script")
    assert script.exit_code == 0 and script.stdout.startswith("#!/usr/bin/env bash") and "sweeper.sim" in script.stdout


def test_best_of_a_study_that_does_not_exist_is_a_user_error(swept):
    workdir, _ = swept
    result = invoke_in(workdir, "best", "nope", "--json")
    assert result.exit_code == 2 and result.stdout == "", result.output


def test_report_writes_html_and_markdown(swept, tmp_path):
    workdir, _ = swept
    result = invoke_in(workdir, "report", "s", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    html = (tmp_path / "report.html").read_text()
    assert "<html" in html and (tmp_path / "report.md").read_text().strip()


def test_sim_best_names_the_models_optimum_and_the_studys_distance_to_it(swept):
    workdir, _ = swept
    result = invoke_in(workdir, "sim", "best", "tiny.yaml", "--study", "s")
    assert result.exit_code == 0, result.output
    assert "modelled output_throughput at C=" in result.output and "of the optimum" in result.output


def test_resume_adds_evaluations_to_the_study(swept, tmp_path):
    workdir = copied(swept, tmp_path)
    result = invoke_in(workdir, "resume", "s", "--trials", "5")  # the budget: one more evaluation
    assert result.exit_code == 0, result.output
    shown = json.loads(invoke_in(workdir, "show", "s", "--json").stdout)
    assert shown["evaluations"] == 5 and shown["running"] == []


def test_validate_re_measures_the_top_and_best_says_so(swept, tmp_path):
    workdir = copied(swept, tmp_path)
    result = invoke_in(workdir, "validate", "s", "--top", "2", "--repeats", "2")
    assert result.exit_code == 0, result.output
    best = json.loads(invoke_in(workdir, "best", "s", "--json").stdout)
    assert best["validated"] is True and best["ci_low"] <= best["value"] <= best["ci_high"]
    assert f"winner: trial {best['trial']} " in result.stdout


def test_init_writes_a_space_and_hosts_once(tmp_path):
    result = invoke_in(tmp_path, "init", "here")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "here" / "space.yaml").is_file() and (tmp_path / "here" / "hosts.yaml").is_file()
    again = invoke_in(tmp_path, "init", "here")
    assert again.exit_code == 2 and "already exist: nothing written" in again.output, again.output
    unknown = invoke_in(tmp_path, "init", "there", "--template", "demoo")
    assert unknown.exit_code == 2 and "did you mean 'demo'?" in unknown.output, unknown.output


def test_kernels_reads_a_saved_trace(tmp_path):
    result = invoke_in(tmp_path, "kernels", str(TRACE), "--top", "3", "--json")
    assert result.exit_code == 0, result.output
    table = json.loads(result.stdout)
    assert table["total_us"] > 0 and table["groups"]
    bad = invoke_in(tmp_path, "kernels", str(ROOT / "hosts.yaml"))
    assert bad.exit_code == 2 and "not a readable chrome trace" in bad.stderr


def test_make_gguf_writes_a_small_model_and_refuses_a_bad_width(tmp_path):
    pytest.importorskip("gguf", reason="pip install -e '.[test]' installs gguf")
    result = invoke_in(tmp_path, "models", "make-gguf", "--layers", "1", "--width", "64", "--vocab", "300",
                       "--out", "m.gguf")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "m.gguf").stat().st_size > 0 and "1 layers x 64" in result.output
    bad = invoke_in(tmp_path, "models", "make-gguf", "--layers", "1", "--width", "100", "--out", "b.gguf")
    assert bad.exit_code == 2 and not (tmp_path / "b.gguf").exists(), bad.output
