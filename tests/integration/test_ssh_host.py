"""The SSH transport against a real OpenSSH server (tests/support/sshd.py): launch, watch, stop, GPU gate,
host keys, connection failures, and quoting of adversarial values. No mocks."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from hypothesis import HealthCheck, given, settings, strategies as st

from sweeper.spec.hosts import HostSpec
from sweeper.errors import UserError
from sweeper.hosts.gpu_gate import GpuBusy, GpusNotReleased, check_gpus_before_launch, wait_gpus_released
from sweeper.hosts.procfs import live_group_members
from sweeper.hosts.ssh import SSHHost
from sweeper.sim.gpumem import record_gpu_memory
from sweeper.trial.launch import stop
from tests.support.ports import free_port, server_socket
from tests.support.tcp_relay import proxy_command
from tests.support.waiting import wait_for

STUBBORN = r"""
import os, signal, subprocess, sys, time
child = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: time.sleep(1)"
kids = [subprocess.Popen([sys.executable, "-c", child]) for _ in range(2)]
print("server up", flush=True)
while True:
    time.sleep(0.1)
"""


def spec_for(sshd, tmp_path, **extra) -> HostSpec:
    return HostSpec(**sshd.host_entry(tmp_path / "work", **extra))


@pytest.fixture
def host(sshd, ssh_home, tmp_path):
    h = SSHHost("box", spec_for(sshd, tmp_path))
    yield h
    h.close()


def trial_dir(tmp_path, n=0) -> Path:
    return tmp_path / "results" / "st" / "trials" / str(n)


def start(host, tmp_path, argv, env=None, n=0, token="tok-1"):
    local = trial_dir(tmp_path, n)
    return host.start_detached(argv, env or {}, str(local), str(local / "server.log"), token)


def test_detached_launch_watch_and_stop_leave_nothing(host, tmp_path):
    proc = start(host, tmp_path, [sys.executable, "-c", STUBBORN])
    remote = tmp_path / "work" / "st" / "0"
    assert proc.log_path == str(remote / "server.log") and proc.pgid == proc.pid
    for name in ("launch.sh", "env.json", "process.json"):
        assert (remote / name).is_file()
    recorded = json.loads((remote / "process.json").read_text())
    assert recorded == {"pid": proc.pid, "pgid": proc.pgid, "start_ticks": proc.start_ticks}
    wait_for(lambda: "server up" in host.read_log(proc, 0)[0])
    assert "server up" in (trial_dir(tmp_path) / "server.log").read_text()  # mirrored locally
    text, offset = host.read_log(proc, 0)
    assert host.read_log(proc, offset) == ("", offset)
    wait_for(lambda: len(host.owned_members(proc)) == 3)
    assert host.is_alive(proc)
    report = host.stop_group(proc, grace_s=0.5)
    assert report.was_running and report.signal == "SIGKILL" and report.left_behind == ()
    assert live_group_members(proc.pgid) == [] and not host.is_alive(proc)


def test_forwarded_port_liveness_and_port_checks(host, tmp_path):
    with socket.socket() as probe:  # the kernel's pick: no other test's or user's server holds it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = start(host, tmp_path, [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)])
    try:
        wait_for(lambda: not host.port_is_free(port))
        url = host.base_url(port)
        assert url != f"http://127.0.0.1:{port}"  # a local forwarded port
        assert requests.get(url + "/", timeout=10).status_code == 200
        assert host.listens_on(proc, port)
        other = start(host, tmp_path, [sys.executable, "-c", "import time; time.sleep(30)"], n=1, token="tok-2")
        assert not host.listens_on(other, port)  # someone else's port is not ours
        host.stop_group(other, 1)
    finally:
        host.stop_group(proc, 2)
    wait_for(lambda: host.port_is_free(port))
    with pytest.raises(requests.ConnectionError):
        requests.get(host.base_url(port) + "/", timeout=10)


def test_gpu_gate_refuses_a_foreign_holder_and_never_kills_it(host, sshd, tmp_path):
    foreign = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "someone-elses-job"])
    try:
        record_gpu_memory(foreign.pid, 0, 40000, sshd.gpu_state)
        with pytest.raises(GpuBusy) as refused:
            check_gpus_before_launch(host, host.spec, [], grace_s=1)
        message = str(refused.value)
        assert f"pid {foreign.pid} (40000 MiB on GPU 0)" in message and "someone-elses-job" in message
        assert "\n" not in message
        assert foreign.poll() is None  # still alive
    finally:
        foreign.kill()
        foreign.wait()
    assert check_gpus_before_launch(host, host.spec, [], grace_s=1) is not None


def test_gpu_gate_stops_this_studys_leftover_server_then_waits_for_release(host, sshd, tmp_path):
    holder = ("import os, sys, time\nsys.path.insert(0, os.environ['PYTHONPATH'])\n"
              "from sweeper.sim.gpumem import record_gpu_memory\n"
              "record_gpu_memory(os.getpid(), 1, 50000)\nprint('holding', flush=True)\ntime.sleep(60)\n")
    leftover = start(host, tmp_path, [sys.executable, "-c", holder], env=sshd.host_env())
    wait_for(lambda: "holding" in host.read_log(leftover, 0)[0])
    baseline = check_gpus_before_launch(host, host.spec, [leftover], grace_s=1)
    assert not host.is_alive(leftover)
    assert all(g.used_mib < 1024 for g in baseline.gpus)
    assert wait_gpus_released(host, host.spec, baseline, leftover, 32000 + os.getpid() % 500 * 10 + 5) is not None


def test_a_port_another_process_took_after_the_stop_is_not_the_servers(host, tmp_path):
    """Once the server let its port go, another process's listener there is no leftover of it: the
    stop and the release check go on at once (they waited 10 s and 30 s, then stopped the sweep)."""
    port = free_port()
    baseline = check_gpus_before_launch(host, host.spec, [], grace_s=1)
    proc = start(host, tmp_path, [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)])
    wait_for(lambda: host.listens_on(proc, port))
    briefly = host.spec.model_copy(update={"gpu_release_timeout_s": 1})
    with pytest.raises(GpusNotReleased, match=f"port {port} is still held by the server's processes"):
        wait_gpus_released(host, briefly, baseline, proc, port)  # ours still listens there
    with server_socket() as taker:
        started = time.monotonic()
        stop(host, proc, port, grace_s=2)
        taker.bind(("127.0.0.1", port))  # the moment ours let it go
        taker.listen()
        assert not host.port_is_free(port)
        assert wait_gpus_released(host, host.spec, baseline, proc, port) is not None
        assert time.monotonic() - started < 5  # the stop's 10 s and the release check's 120 s not waited


def test_server_crash_is_seen_as_dead(host, tmp_path):
    proc = start(host, tmp_path, [sys.executable, "-c", "import time; time.sleep(30)"])
    assert host.is_alive(proc)
    os.killpg(proc.pgid, signal.SIGKILL)
    wait_for(lambda: not host.is_alive(proc), timeout=2)


def test_reconnects_after_the_session_is_killed(host, sshd, tmp_path):
    proc = start(host, tmp_path, [sys.executable, "-c", "import time; time.sleep(30)"])
    session = sshd.session_serving(host.session_local_port())
    assert session and host.take_disruption() is None
    os.kill(session, signal.SIGKILL)
    assert host.is_alive(proc)  # reconnected, and the server (own session) survived the drop
    assert "reconnected" in host.take_disruption()
    assert host.take_disruption() is None
    host.stop_group(proc, 1)


# ---------------------------------------------------------------- host keys and connection errors

def test_unknown_host_key_is_refused_with_its_fingerprint(sshd, isolated_home, tmp_path, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    with pytest.raises(UserError) as refused:
        SSHHost("box", spec_for(sshd, tmp_path))
    expected = subprocess.run(["ssh-keygen", "-lf", str(sshd.host_key.with_suffix(".pub"))],
                              capture_output=True, text=True, check=True).stdout.split()[1]
    message = str(refused.value)
    assert expected.startswith("SHA256:") and expected in message and "\n" not in message
    assert f"ssh-keyscan -p {sshd.port} 127.0.0.1 >> ~/.ssh/known_hosts" in message
    assert "host_key_policy: accept-new" in message
    assert not (isolated_home / ".sweeper" / "known_hosts").exists()  # never accepted silently


def test_accept_new_records_the_key_in_sweepers_known_hosts(sshd, isolated_home, tmp_path, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    SSHHost("box", spec_for(sshd, tmp_path, host_key_policy="accept-new")).close()
    recorded = (isolated_home / ".sweeper" / "known_hosts").read_text()
    assert recorded.split()[1:] == sshd.known_hosts_line().split()[1:]
    SSHHost("box", spec_for(sshd, tmp_path)).close()  # strict now succeeds: the key is known


def test_a_changed_host_key_is_refused(sshd, isolated_home, tmp_path, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    other = sshd.other_key.with_suffix(".pub").read_text().split()
    (isolated_home / ".ssh").mkdir()
    (isolated_home / ".ssh" / "known_hosts").write_text(f"[127.0.0.1]:{sshd.port} {other[0]} {other[1]}\n")
    with pytest.raises(UserError, match="host key changed"):
        SSHHost("box", spec_for(sshd, tmp_path))


def _one_line_within(make, seconds):
    started = time.monotonic()
    with pytest.raises(UserError) as failed:
        make()
    elapsed = time.monotonic() - started
    assert "\n" not in str(failed.value)
    assert elapsed < seconds + 1.5, elapsed
    return str(failed.value)


def test_connection_failures_are_one_clear_line_within_the_timeout(sshd, ssh_home, tmp_path):
    wrong_key = _one_line_within(lambda: SSHHost("box", spec_for(
        sshd, tmp_path, identity_file=str(sshd.other_key), connect_timeout_s=3)), 3)
    assert "authentication failed" in wrong_key
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        closed_port = closed.getsockname()[1]
    refused = _one_line_within(lambda: SSHHost("box", spec_for(
        sshd, tmp_path, port=closed_port, connect_timeout_s=3)), 3)
    assert f"127.0.0.1:{closed_port}" in refused and "refused" in refused
    with socket.socket() as silent:  # accepts TCP but never speaks SSH: an unresponsive host
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        timed_out = _one_line_within(lambda: SSHHost("box", spec_for(
            sshd, tmp_path, port=silent.getsockname()[1], connect_timeout_s=2)), 2)
    assert "timed out" in timed_out
    missing = _one_line_within(lambda: SSHHost("box", spec_for(
        sshd, tmp_path, identity_file=str(tmp_path / "nope"))), 1)
    assert "not found" in missing


def test_ssh_config_alias_and_proxy_jump(sshd, ssh_home, tmp_path):
    (ssh_home / ".ssh" / "config").write_text(
        f"Host gpu-box\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n  IdentityFile {sshd.user_key}\n\n"
        f"Host inner\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n  IdentityFile {sshd.user_key}\n"
        f"  ProxyJump gpu-box\n")
    base = sshd.host_entry(tmp_path / "work")
    for alias in ("gpu-box", "inner"):
        entry = {k: v for k, v in base.items() if k not in ("port", "user", "identity_file")}
        host = SSHHost("box", HostSpec(**{**entry, "address": alias}))
        try:
            assert host.port_is_free(1) in (True, False)
            assert len(host._clients) == (2 if alias == "inner" else 1)
        finally:
            host.close()


# ---------------------------------------------------------------- ~/.ssh/config as OpenSSH reads it

def alias_spec(sshd, tmp_path, config: Path, **extra) -> HostSpec:
    """Host "gpu-box" as an alias of `config` (the hosts.yaml `ssh_config:`), port/user/key from there."""
    entry = {k: v for k, v in sshd.host_entry(tmp_path / "work").items() if k not in ("port", "user", "identity_file")}
    return HostSpec(**{**entry, "address": "gpu-box", "ssh_config": str(config), **extra})


def relayed(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def _closed_port() -> int:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        return closed.getsockname()[1]


def test_include_and_proxy_command_with_explicit_port_and_user_winning(sshd, ssh_home, tmp_path):
    log = tmp_path / "relay.log"
    (ssh_home / ".ssh" / "conf.d").mkdir()
    (ssh_home / ".ssh" / "conf.d" / "gpu.conf").write_text(  # Port/User wrong on purpose: hosts.yaml wins
        f"Host gpu-box\n  HostName 127.0.0.1\n  Port {_closed_port()}\n  User nobody\n"
        f"  IdentityFile {sshd.user_key}\n  ProxyCommand {proxy_command(log, '%h', '%p', '%r')}\n")
    config = tmp_path / "ssh_config"
    config.write_text("Include conf.d/*.conf\n")  # relative: under ~/.ssh, as OpenSSH reads it
    host = SSHHost("box", alias_spec(sshd, tmp_path, config, port=sshd.port, user="root"))
    try:
        assert host.run(["echo", "through the proxy"]).stdout == "through the proxy\n"
        [[pid, *args]] = relayed(log)
        assert args == ["127.0.0.1", str(sshd.port), "root"]  # %h %p %r: the explicit port and user
    finally:
        host.close()
    assert not Path(f"/proc/{pid}").exists()  # the proxy process ended and was reaped


def test_proxy_jump_through_a_hop_reached_by_proxy_command(sshd, ssh_home, tmp_path):
    log, config = tmp_path / "relay.log", tmp_path / "ssh_config"
    hop = f"  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n  IdentityFile {sshd.user_key}\n"
    config.write_text(f"Host bastion\n{hop}  ProxyCommand {proxy_command(log, '%h', '%p')}\n"
                      f"Host gpu-box\n{hop}  ProxyJump bastion\n")
    host = SSHHost("box", alias_spec(sshd, tmp_path, config))
    try:
        assert len(host._clients) == 2 and host.run(["true"]).returncode == 0
        assert [args for _, *args in relayed(log)] == [["127.0.0.1", str(sshd.port)]]  # the first hop only
    finally:
        host.close()


def test_a_failing_proxy_command_is_one_line_with_its_reason(sshd, ssh_home, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(f"Host gpu-box\n  HostName 127.0.0.1\n  User root\n  IdentityFile {sshd.user_key}\n"
                      f"  ProxyCommand {proxy_command(tmp_path / 'relay.log', '%h', str(_closed_port()))}\n")
    message = _one_line_within(lambda: SSHHost("box", alias_spec(sshd, tmp_path, config, connect_timeout_s=3)), 3)
    assert "ProxyCommand exited 1" in message and "Connection refused" in message


@pytest.fixture
def ssh_agent(sshd, tmp_path, monkeypatch):
    """A real ssh-agent holding the authorized key (stopped by its own pid)."""
    socket_path = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(socket_path)], stdout=subprocess.DEVNULL)
    try:
        wait_for(socket_path.exists)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(socket_path))
        subprocess.run(["ssh-add", "-q", str(sshd.user_key)], check=True, capture_output=True)
        yield socket_path
    finally:
        agent.terminate()
        agent.wait(10)


def test_identities_only_offers_the_configured_keys_only(sshd, ssh_home, ssh_agent, tmp_path):
    def connect(identity: Path, identities_only: str) -> None:
        config = tmp_path / "ssh_config"
        config.write_text(f"Host gpu-box\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n"
                          f"  IdentityFile {identity}\n  IdentitiesOnly {identities_only}\n")
        SSHHost("box", alias_spec(sshd, tmp_path, config, connect_timeout_s=3)).close()

    connect(sshd.other_key, "no")  # the agent's key gets in
    connect(sshd.user_key, "yes")
    refused = _one_line_within(lambda: connect(sshd.other_key, "yes"), 3)
    assert "authentication failed" in refused


def test_user_and_global_known_hosts_files_are_honoured(sshd, isolated_home, tmp_path, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    trusted, empty = tmp_path / "trusted_hosts", tmp_path / "empty_hosts"
    trusted.write_text(sshd.known_hosts_line())
    empty.write_text("")
    config = tmp_path / "ssh_config"

    def connect(known_hosts_lines: str) -> None:
        config.write_text(f"Host gpu-box\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n"
                          f"  IdentityFile {sshd.user_key}\n{known_hosts_lines}")
        SSHHost("box", alias_spec(sshd, tmp_path, config)).close()

    connect(f"  UserKnownHostsFile {tmp_path / 'absent'} {trusted}\n")
    connect(f"  UserKnownHostsFile /dev/null\n  GlobalKnownHostsFile {trusted}\n")
    sshd.trust(isolated_home)  # ~/.ssh/known_hosts has the key, but the config names other files
    with pytest.raises(UserError) as refused:
        connect(f"  UserKnownHostsFile {empty}\n  GlobalKnownHostsFile {empty}\n")
    message = str(refused.value)
    assert "is not in known_hosts" in message and f"ssh-keyscan -p {sshd.port} 127.0.0.1 >> {empty}" in message
    assert empty.read_text() == "" and not (isolated_home / ".sweeper" / "known_hosts").exists()


# ---------------------------------------------------------------- quoting

ADVERSARIAL = ["a b", "it's", 'say "hi"', "x; touch {canary}", "$(touch {canary})", "`touch {canary}`",
               "line\nbreak", "--flag=$HOME", "*", "\\", "", "{{}}", "&& touch {canary} &"]
ECHO_ARGV = "import json, os, sys; print('ARGV=' + json.dumps([sys.argv[1:], os.environ['ADV']]), flush=True)"


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(values=st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=12),
                       max_size=4),
       env_value=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=12))
def test_adversarial_values_reach_argv_verbatim(host, tmp_path, values, env_value):
    canary = tmp_path / "canary"
    fixed = [v.format(canary=canary) for v in ADVERSARIAL]
    argv = [sys.executable, "-c", ECHO_ARGV, *fixed, *values]
    proc = start(host, tmp_path, argv, env={"ADV": env_value + "$(touch " + str(canary) + ")"},
                 n=threading.get_ident() % 1000 + int(time.monotonic() * 1000) % 100000)
    line = wait_for(lambda: next((l for l in host.read_log(proc, 0)[0].splitlines() if l.startswith("ARGV=")), None))
    got_argv, got_env = json.loads(line[5:])
    assert got_argv == [*fixed, *values]
    assert got_env == env_value + "$(touch " + str(canary) + ")"
    assert not canary.exists()
    host.stop_group(proc, 1)


def test_a_server_whose_start_was_never_recorded_is_found_by_its_token(host, tmp_path):
    """The agent scans the host for the token (the launch's process.json may never have been
    written: the controller died first); the found group is stopped, another token's is not."""
    proc = start(host, tmp_path, [sys.executable, "-c", STUBBORN], token="tok-ours")
    other = start(host, tmp_path, [sys.executable, "-c", "import time\nwhile True: time.sleep(0.1)"], n=1,
                  token="tok-other")
    try:
        wait_for(lambda: len(host.owned_members(proc)) == 3)
        (tmp_path / "work" / "st" / "0" / "process.json").unlink()
        intent = host.launch_intent(str(trial_dir(tmp_path)), "tok-ours")
        assert intent.run_dir == str(tmp_path / "work" / "st" / "0")
        found = host.find_servers([intent])
        assert [(f.pid, f.pgid, f.token) for f in found] == [(proc.pid, proc.pgid, "tok-ours")]
        report = host.stop_group(found[0], grace_s=0.5)
        assert report.was_running and live_group_members(proc.pgid) == []
        assert host.is_alive(other)
    finally:
        host.stop_group(other, grace_s=0.5)
