"""Many hosts, one study: three real OpenSSH servers (each its own "host", with its own nvidia-smi
stand-in and GPU bookkeeping) and a real PostgreSQL cluster (tests/support/pg.py).

Each host's simulator writes a journal of its server starts and stops (SWEEPER_SIM_JOURNAL) on
the host side; the one-server-per-host checks read that journal, not the controllers' claims."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from sweeper.hosts.procfs import live_group_members
from sweeper.study.trials import is_evaluation
from tests.support.ports import worker_port
from tests.support.spaces import TINY_SPACE
from tests.support.sshd import start_sshd
from tests.support.waiting import wait_for

# one worker runs this module: its module fixture is built once (xdist --dist loadgroup)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("many_hosts")]

HOSTS = ("a", "b", "c")
FAST = ("--heartbeat", "1", "--grace", "6")  # a dead worker is noticed in seconds, not minutes


@pytest.fixture(scope="module")
def three_sshd(tmp_path_factory):
    started = [start_sshd(tmp_path_factory.mktemp(f"sshd-{name}")) for name in HOSTS]
    yield {name: server for name, (server, _) in zip(HOSTS, started)}
    for _, proc in started:
        proc.terminate()  # by its own pid
        proc.wait(10)


@pytest.fixture
def many(cli, three_sshd, isolated_home, monkeypatch, tmp_path):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    entries = {}
    for index, (name, server) in enumerate(three_sshd.items()):
        server.trust(isolated_home)
        # the three "hosts" are one machine: separate port ranges stand for separate port spaces
        entry = server.host_entry(tmp_path / f"work-{name}", base_port=worker_port(33000) + 2500 * index)
        journal = tmp_path / f"journal-{name}.jsonl"
        entry["env"] = {**entry["env"], "SWEEPER_SIM_JOURNAL": str(journal)}
        entries[name] = entry
    (cli.workdir / "hosts.yaml").write_text(yaml.safe_dump({"hosts": entries}))
    cli.journals = {name: tmp_path / f"journal-{name}.jsonl" for name in HOSTS}
    cli.work = {name: tmp_path / f"work-{name}" for name in HOSTS}
    return cli


def server_lifetimes(journal: Path) -> list[tuple[float, float, int]]:
    """(start, stop, pid) of every server the host ran, from the host's own journal."""
    if not journal.exists():
        return []
    starts, spans = {}, []
    for line in journal.read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "start":
            starts[event["pid"]] = event["t"]
        else:
            spans.append((starts.pop(event["pid"]), event["t"], event["pid"]))
    assert not starts, f"servers that never stopped: {starts}"
    return sorted(spans)


def overlaps(spans: list[tuple[float, float, int]]) -> list[tuple]:
    return [(a, b) for a, b in zip(spans, spans[1:]) if b[0] < a[1]]


def load(url: str, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=url)


def check_budget_spent_once(study: optuna.Study, budget: int) -> list[optuna.trial.FrozenTrial]:
    trials = study.get_trials()
    assert not [t.number for t in trials if t.state == TrialState.RUNNING]
    # what may wait: queued seeds and retries the budget no longer needed, never a sampled trial
    assert all("seed" in t.user_attrs or "retry_of" in t.user_attrs
               for t in trials if t.state == TrialState.WAITING)
    evaluations = [t for t in trials if is_evaluation(t)]
    assert len(evaluations) == budget
    keys = [t.user_attrs["config_key"] for t in evaluations]
    assert len(keys) == len(set(keys)), "a config was measured twice"
    return evaluations


def test_three_workers_on_three_hosts_spend_one_budget(many, pg_url):
    result = many.run("sweep", "tiny.yaml", "--host", "a", "--host", "b", "--host", "c", "--storage", pg_url,
                      "--study", "m1", "--trials", "6", *FAST, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    study = load(pg_url, "m1")
    evaluations = check_budget_spent_once(study, 6)
    assert {t.user_attrs["host"] for t in evaluations} == set(HOSTS)
    # every launched trial is recorded once: its folder exists on exactly the host that ran it
    launched = {t.number: t.user_attrs["host"] for t in study.get_trials() if "process" in t.user_attrs}
    on_hosts = {}
    for name, work in many.work.items():
        for folder in (work / "m1").iterdir() if (work / "m1").exists() else []:
            assert folder.name not in on_hosts, f"trial {folder.name} ran on two hosts"
            on_hosts[folder.name] = name
    assert {int(k): v for k, v in on_hosts.items()} == launched
    for name in HOSTS:
        spans = server_lifetimes(many.journals[name])
        assert len(spans) == sum(1 for h in launched.values() if h == name)
        assert overlaps(spans) == []
    assert "trial" in result.stdout and "[a]" in result.stdout and "[c]" in result.stdout


def start_env(cli, env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen(cli.argv(*args), cwd=cli.workdir, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


def running_on(url: str, name: str, host: str):
    try:
        trials = load(url, name).get_trials(states=(TrialState.RUNNING,))
    except KeyError:
        return None
    for t in trials:
        if t.user_attrs.get("host") == host and t.user_attrs.get("stage") == "load" and "process" in t.user_attrs:
            return t
    return None


def starting_on(url: str, name: str, host: str):
    """A RUNNING trial of `host` whose server is starting (`--load-seconds: 400`: 4 s of wait_ready,
    where only the interrupt ends it; a trial polled later, in its output check or its stop, can
    end first: the garbage seed failed its check just before a Ctrl-C, rightly not `interrupted`)."""
    try:
        trials = load(url, name).get_trials(states=(TrialState.RUNNING,))
    except KeyError:
        return None
    return next((t for t in trials if t.user_attrs.get("host") == host and "process" in t.user_attrs
                 and t.user_attrs.get("stage") == "wait_ready"), None)


def lease_holder_pid(url: str, slot: str) -> int:
    from sweeper.fleet.leases import LeaseBook

    book = LeaseBook(url, 60)
    try:
        holder, _ = book.holders()[slot]
    finally:
        book.close()
    return int(holder.split(":")[1])


def test_a_sigkilled_worker_is_recovered_and_its_trial_retried(many, pg_url):
    first = many.start("sweep", "tiny.yaml", "--host", "a", "--storage", pg_url, "--study", "k2", "--trials", "4", *FAST)
    env = {**many.env, "SWEEPER_STORAGE": pg_url}
    other = None
    try:
        trial = wait_for(lambda: running_on(pg_url, "k2", "a"), timeout=240)
        other = start_env(many, env, "worker", "k2", "--host", "b")
        worker_pid = lease_holder_pid(pg_url, "a")
        os.kill(worker_pid, signal.SIGKILL)  # the `sweeper worker` process driving host a, mid-trial
        first.wait(60)
        process = trial.user_attrs["process"]
        assert live_group_members(process["pgid"]), "the server outlives its worker"
        later = start_env(many, env, "worker", "k2", "--host", "a")  # a later start on host a
        out_later, err_later = later.communicate(timeout=600)
        out_other, err_other = other.communicate(timeout=600)
    finally:
        for proc in (first, other):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert later.returncode == 0 and other.returncode == 0, err_later[-2000:] + err_other[-2000:]
    assert live_group_members(process["pgid"]) == []
    # stopped by the later start: at once when the trial is already stale, else on taking over the lease
    assert (f"stopped the server of dead trial {trial.number} " in out_later
            or f"stopped the server of trial {trial.number} of k2" in out_later), out_later + out_other
    study = load(pg_url, "k2")
    check_budget_spent_once(study, 4)
    dead = study.trials[trial.number]
    assert dead.state == TrialState.FAIL
    retries = [t for t in study.trials if t.user_attrs.get("retry_of") == trial.number]
    assert len(retries) == 1 and retries[0].state in (TrialState.COMPLETE, TrialState.PRUNED), \
        [(t.number, t.state.name, t.user_attrs) for t in study.trials]
    assert retries[0].params == dead.params
    assert overlaps(server_lifetimes_allowing_killed(many.journals["a"], process["pid"])) == []


def server_lifetimes_allowing_killed(journal: Path, killed_pid: int) -> list[tuple[float, float, int]]:
    """Lifetimes on a host where one server was SIGKILLed by the recovery (it logs no stop): its
    stop is the next server's start at the latest, which the overlap check then confirms."""
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    starts, spans = {}, []
    for event in events:
        if event["event"] == "start":
            starts[event["pid"]] = event["t"]
        else:
            spans.append((starts.pop(event["pid"]), event["t"], event["pid"]))
    for pid, t in starts.items():
        later = [s for s, _, _ in spans if s > t]
        spans.append((t, min(later) if later else time.time(), pid))
    return sorted(spans)


def test_two_controllers_on_one_host_never_run_two_servers_at_once(many, pg_url):
    one = many.start("sweep", "tiny.yaml", "--host", "a", "--storage", pg_url, "--study", "t1", "--trials", "3", *FAST)
    two = many.start("sweep", "tiny.yaml", "--host", "a", "--storage", pg_url, "--study", "t2", "--trials", "3", *FAST)
    try:
        out1, err1 = one.communicate(timeout=600)
        out2, err2 = two.communicate(timeout=600)
    finally:
        for proc in (one, two):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert one.returncode == 0 and two.returncode == 0, err1[-2000:] + err2[-2000:]
    for name in ("t1", "t2"):
        check_budget_spent_once(load(pg_url, name), 3)
    spans = server_lifetimes(many.journals["a"])
    assert len(spans) >= 6
    assert overlaps(spans) == [], "two servers ran on host a at once"


def test_gpu_sets_run_two_small_configs_side_by_side_on_disjoint_gpus(many, pg_url):
    hosts = yaml.safe_load((many.workdir / "hosts.yaml").read_text())
    hosts["hosts"]["a"]["gpu_sets"] = ["0,1,2,3", "4,5,6,7"]
    (many.workdir / "hosts.yaml").write_text(yaml.safe_dump(hosts))
    (many.workdir / "sets.yaml").write_text(TINY_SPACE + "gpus: tp_size\n")
    result = many.run("sweep", "sets.yaml", "--host", "a", "--storage", pg_url, "--study", "g1", "--trials", "8",
                      *FAST, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "2 workers on a" in result.stdout
    study = load(pg_url, "g1")
    evaluations = check_budget_spent_once(study, 8)
    for t in evaluations:  # the slots a config leased follow from its tp_size
        assert len(t.user_attrs["slots"]) == (1 if t.params["tp_size"] == 4 else 2), t.user_attrs["slots"]
    events = [json.loads(line) for line in many.journals["a"].read_text().splitlines()]
    gpus = {e["pid"]: set(map(int, e["gpus"].split(","))) for e in events if e["event"] == "start"}
    spans = server_lifetimes(many.journals["a"])
    for i, (start, stop, pid) in enumerate(spans):
        for other_start, other_stop, other in spans[i + 1:]:
            if other_start < stop:  # ran at the same time: only on disjoint GPU sets
                assert not gpus[pid] & gpus[other], (gpus[pid], gpus[other])


def test_ctrl_c_stops_every_workers_server_and_a_later_worker_requeues_the_trials(many, pg_url):
    (many.workdir / "slow.yaml").write_text(TINY_SPACE.replace("--load-seconds: 30", "--load-seconds: 400"))
    sweep = many.start("sweep", "slow.yaml", "--host", "a", "--host", "b", "--storage", pg_url, "--study", "i1",
                       "--trials", "6", *FAST)
    try:
        def both_serving():
            assert sweep.poll() is None, "the sweep ended before both hosts served"
            found = [starting_on(pg_url, "i1", h) for h in ("a", "b")]
            return found if all(found) else None

        running = wait_for(both_serving, timeout=240, interval=0.05)
        os.killpg(sweep.pid, signal.SIGINT)  # what Ctrl-C in the terminal does: the whole group
        out, err = sweep.communicate(timeout=120)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
    assert sweep.returncode == 130, err[-2000:]
    assert "interrupted" in err and "Traceback" not in err, err[-2000:]
    for trial in running:
        assert live_group_members(trial.user_attrs["process"]["pgid"]) == []
        recorded = load(pg_url, "i1").trials[trial.number]
        assert recorded.state == TrialState.FAIL and recorded.user_attrs.get("interrupted")
    later = subprocess.run(many.argv("worker", "i1", "--host", "c"), cwd=many.workdir, capture_output=True,
                           text=True, timeout=600, env={**many.env, "SWEEPER_STORAGE": pg_url})
    assert later.returncode == 0, later.stderr[-2000:]
    for trial in running:
        assert f"interrupted trial {trial.number} queued to run again" in later.stdout
    check_budget_spent_once(load(pg_url, "i1"), 6)
