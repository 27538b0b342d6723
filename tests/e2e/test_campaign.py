"""`sweeper campaign` as a user runs it on the simulator: every phase, the morning summary, the
report and launch script; SIGKILL in each phase and `resume` continuing there without redoing
finished work; warm start from an earlier study."""

from __future__ import annotations

import json
import os
import signal

import optuna
import pytest

from sweeper.hosts.procfs import live_group_members
from tests.support.cli import server_in_load_stage
from tests.support.spaces import CAMPAIGN_SPACE
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

ARGS = ("--finalists", "2", "--repeats", "2", "--max-repeats", "3", "--seed", "3")


@pytest.fixture
def ccli(cli):
    (cli.workdir / "camp.yaml").write_text(CAMPAIGN_SPACE)
    return cli


def open_study(cli, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{cli.workdir}/results/{name}/study.db")


def attrs_of(cli, name: str) -> dict:
    try:
        return open_study(cli, name).user_attrs
    except Exception:  # not created yet
        return {}


def trials_of(cli, name: str) -> list:
    try:
        return open_study(cli, name).trials
    except Exception:  # not created yet
        return []


def kill_controller(controller) -> None:
    if controller.poll() is None:
        os.killpg(controller.pid, signal.SIGKILL)  # the controller alone: servers run in sessions of their own
    controller.wait(10)


def no_server_left(cli) -> bool:
    return all(live_group_members(json.loads(p.read_text())["pgid"]) == []
               for p in (cli.workdir / "results").rglob("process.json"))


@pytest.mark.timeout(900)
def test_campaign_runs_every_phase_and_heads_the_report_with_the_summary(ccli):
    # 12 launches in all: the 6 of the sweep, the profile's one, so 5 for validation
    result = ccli.run("campaign", "camp.yaml", "--study", "cp", *ARGS, "--max-launches", "12", timeout=800)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    out = result.stdout
    for phase in ("sweep", "validate", "profile", "report", "script"):
        assert f"campaign phase: {phase}" in out
    assert "winner: trial" in out and "launches:" in out and "GPU hours:" in out
    assert "TIE:" in out or "separated: yes" in out
    study = open_study(ccli, "cp")
    attrs = study.user_attrs
    assert attrs["campaign_phase"] == "done"
    summary = attrs["campaign_summary"]
    winner = summary["winner"]["trial"]
    profile = attrs["campaign"]["phases"]["profile"]
    assert f"profile:{winner}" in attrs, profile  # profiled, and the gap is split by its kernel groups
    assert summary["gap"]["kernels"] and "the step by kernel group" in out
    validation = open_study(ccli, "cp-validate")
    labels = [t.user_attrs["label"] for t in validation.trials]
    assert summary["launches"]["validation"] == sum(1 for t in validation.trials if t.user_attrs.get("launched"))
    assert summary["launches"]["profile"] == 1 and summary["launches"]["total"] <= 12, summary["launches"]
    from sweeper.study.trials import ranked_trials

    first_round = [f"trial {t.number}" for t in ranked_trials(study)[:2]]
    assert labels[:2 * len(first_round)] == first_round * 2  # interleaved rounds, best first
    # the first round measures two repeats in each launch: both parts of the noise floor, recorded
    assert [t.user_attrs.get("repeats") for t in validation.trials[:4]] == [2, 2, 2, 2]
    floor = attrs["noise_floor"]
    assert floor["launches"] >= 2 and floor["repeats"] == 2 and floor["within_cv"] is not None, floor
    assert validation.user_attrs["noise_floor"] == floor
    report = (ccli.workdir / "results/cp/report.md").read_text()
    assert report.index("Campaign summary") < report.index("Summary\n") and "Finalists re-measured" in report
    script = (ccli.workdir / "results/cp/serve-winner.sh").read_text()
    assert script.startswith("#!/usr/bin/env bash") and f"trial {winner}" in script
    best = json.loads(ccli.run("best", "cp", "--json").stdout)
    assert best["validated"] is True and best["trial"] == winner
    assert no_server_left(ccli)


@pytest.mark.timeout(2400)
def test_campaign_killed_in_each_phase_resumes_there_without_redoing_work(ccli):
    cli = ccli
    # 1. SIGKILL while a sweep trial is loading its server
    controller = cli.start("campaign", "camp.yaml", "--study", "ck", *ARGS)
    try:
        wait_for(lambda: server_in_load_stage(cli.workdir, "ck"), timeout=300)
    finally:
        kill_controller(controller)
    assert attrs_of(cli, "ck")["campaign_phase"] == "sweep"

    # 2. resumed: the sweep finishes; SIGTERM (as Ctrl-C) in validation once a run finished and
    # another runs: the server stopped, and the hint names the campaign, not its validation study
    controller = cli.start("resume", "ck")
    try:
        def validating():
            assert controller.poll() is None, controller.communicate()[1][-2000:]  # a dead controller: its why
            if attrs_of(cli, "ck").get("campaign_phase") != "validate":
                return None
            trials = trials_of(cli, "ck-validate")
            done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
            running = [t for t in trials if t.state == optuna.trial.TrialState.RUNNING and "process" in t.user_attrs]
            return (done, running) if done and running else None
        wait_for(validating, timeout=1200, interval=0.2)  # the rest of the sweep first
        controller.send_signal(signal.SIGTERM)
        _, stderr = controller.communicate(timeout=120)
        assert controller.returncode == 130 and "Continue with: sweeper resume ck " in stderr, stderr[-2000:]
    finally:
        kill_controller(controller)
    sweep_numbers = {t.number for t in open_study(cli, "ck").trials}
    finished = {t.number: t.datetime_complete for t in open_study(cli, "ck-validate").trials
                if t.state == optuna.trial.TrialState.COMPLETE}

    # 3. resumed: validation goes on; SIGKILL while the winner's profile server runs
    controller = cli.start("resume", "ck")
    try:
        wait_for(lambda: attrs_of(cli, "ck").get("profile_server"), timeout=600, interval=0.2)
    finally:
        kill_controller(controller)
    assert attrs_of(cli, "ck")["campaign_phase"] == "profile"
    assert {t.number for t in open_study(cli, "ck").trials} == sweep_numbers  # no sweep trial redone
    validation = open_study(cli, "ck-validate")
    for t in validation.trials:  # finished validation runs kept as they were, never re-run
        if t.number in finished:
            assert t.datetime_complete == finished[t.number]
    assert any(t.user_attrs.get("retry_of") is not None for t in validation.trials)  # the killed run, again
    launched_validation = sum(1 for t in validation.trials if t.user_attrs.get("launched"))

    # 4. resumed to the end
    result = cli.run("resume", "ck", timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "campaign phase: sweep" not in result.stdout and "campaign phase: validate" not in result.stdout
    assert "campaign phase: profile" in result.stdout and "winner: trial" in result.stdout
    assert "stopped the server an interrupted profile left" in result.stderr + result.stdout
    assert sum(1 for t in open_study(cli, "ck-validate").trials if t.user_attrs.get("launched")) == launched_validation
    attrs = attrs_of(cli, "ck")
    assert attrs["campaign_phase"] == "done" and (cli.workdir / "results/ck/serve-winner.sh").is_file()
    assert no_server_left(cli)
    assert not attrs.get("profile_server")


@pytest.mark.timeout(900)
def test_warm_start_carries_seeds_skips_broken_configs_and_the_reference(ccli):
    cli = ccli
    first = cli.run("sweep", "camp.yaml", "--study", "w1", "--trials", "3", timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    old = open_study(cli, "w1")
    assert old.user_attrs.get("reference_samples")
    result = cli.run("sweep", "camp.yaml", "--study", "w2", "--trials", "3", "--warm-start", "w1", timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "warm start: seed warm w1#0" in result.stdout
    assert "warm start: will skip a broken config: check_output/bad_output" in result.stdout
    new = open_study(cli, "w2")
    warm = new.user_attrs["warm_start"]
    assert warm["sources"] == ["w1"] and "warm w1#0" in [seed["label"] for seed in warm["seeds"]]
    assert new.user_attrs["reference_source"].startswith("warm start: seed baseline")
    trials = sorted(new.trials, key=lambda t: t.number)
    assert trials[0].user_attrs["seed"].startswith("warm w1#")  # warm seeds run first
    skipped = [t for t in trials if "skipped_broken" in t.user_attrs]
    assert skipped and "study w1" in skipped[0].user_attrs["skipped_broken"]
    assert not skipped[0].user_attrs.get("launched")

    # a storage URL with the study name after '#'
    url = f"sqlite:///{cli.workdir}/results/w1/study.db#w1"
    again = cli.run("sweep", "camp.yaml", "--study", "w3", "--trials", "1", "--warm-start", url, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "warm start: seed warm w1#0" in again.stdout
    bad = cli.run("sweep", "camp.yaml", "--study", "w4", "--warm-start", "sqlite:///nowhere.db")
    assert bad.returncode != 0 and "needs the study name after '#'" in bad.stderr
