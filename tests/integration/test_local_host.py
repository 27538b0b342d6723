"""The local transport against real processes: detached groups, ownership, group stop."""

import os
import signal
import sys
import time

import pytest

from sweeper.spec.hosts import HostSpec
from sweeper.hosts.local import LocalHost
from sweeper.hosts.procfs import live_group_members
from tests.support.waiting import wait_for

# A "server" that forks two children which ignore SIGTERM, like schedulers that outlive their parent.
STUBBORN = r"""
import os, signal, subprocess, sys, time
child = ("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
         "print('child ignores SIGTERM', flush=True)\nwhile True: time.sleep(1)")
kids = [subprocess.Popen([sys.executable, "-c", child]) for _ in range(2)]
print("server up", flush=True)
while True:
    time.sleep(0.1)
"""


@pytest.fixture
def host():
    h = LocalHost("local", HostSpec(transport="local"))
    yield h
    h.close()


def start(host, tmp_path, code=STUBBORN, token="tok-1"):
    return host.start_detached([sys.executable, "-c", code], {"EXTRA": "1"}, str(tmp_path),
                               str(tmp_path / "server.log"), token)


def test_detached_start_records_group_and_log(host, tmp_path):
    proc = start(host, tmp_path)
    try:
        assert proc.pgid == proc.pid != os.getpgid(0)  # its own session, not ours
        assert proc.start_ticks > 0
        wait_for(lambda: "server up" in host.read_log(proc, 0)[0])
        wait_for(lambda: len(host.owned_members(proc)) == 3)
        assert host.is_alive(proc)
        text, offset = host.read_log(proc, 0)
        assert host.read_log(proc, offset) == ("", offset)  # incremental by offset
    finally:
        os.killpg(proc.pgid, signal.SIGKILL)


def test_a_launch_into_a_used_folder_starts_a_new_log(host, tmp_path):
    (tmp_path / "server.log").write_text("ValueError: port at 31000 is not available. Port is already in use.\n")
    proc = start(host, tmp_path, code="print('second server up', flush=True)")
    wait_for(lambda: not host.is_alive(proc))
    assert host.read_log(proc, 0)[0] == "second server up\n"


def test_stop_escalates_to_sigkill_and_leaves_nothing(host, tmp_path):
    proc = start(host, tmp_path)
    # The children must have installed their SIGTERM handler, not merely exist (a busy machine
    # can take longer than the grace to start Python).
    wait_for(lambda: host.read_log(proc, 0)[0].count("child ignores SIGTERM") == 2)
    report = host.stop_group(proc, grace_s=0.5)
    assert report.was_running and report.signal == "SIGKILL" and report.left_behind == ()
    assert live_group_members(proc.pgid) == []
    assert not host.is_alive(proc)


def test_children_outlive_a_killed_parent_until_the_group_stop(host, tmp_path):
    proc = start(host, tmp_path)
    wait_for(lambda: len(host.owned_members(proc)) == 3)
    os.kill(proc.pid, signal.SIGKILL)  # the main process dies, like a crashed API server
    wait_for(lambda: not host.is_alive(proc))
    assert len(host.owned_members(proc)) == 2  # orphans still hold the "GPU"
    report = host.stop_group(proc, grace_s=0.2)
    assert report.was_running and host.owned_members(proc) == []


def test_graceful_stop_uses_sigterm(host, tmp_path):
    proc = start(host, tmp_path, code="import time\nwhile True: time.sleep(0.1)")
    wait_for(lambda: host.owned_members(proc) != [])
    report = host.stop_group(proc, grace_s=5)
    assert report.signal == "SIGTERM" and report.seconds < 5


def test_foreign_process_in_the_group_is_never_signalled(host, tmp_path):
    """Only processes carrying our token are ours, even inside our process group."""
    code = ("import os, subprocess, sys, time\n"
            "env = {k: v for k, v in os.environ.items() if k != 'SWEEPER_RUN_TOKEN'}\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'], env=env)\n"
            "time.sleep(30)\n")
    proc = start(host, tmp_path, code=code)
    wait_for(lambda: len(live_group_members(proc.pgid)) == 2)
    report = host.stop_group(proc, grace_s=2)
    assert len(report.skipped_foreign) == 1
    foreign = report.skipped_foreign[0]
    try:
        assert os.kill(foreign, 0) is None  # still alive
        assert host.owned_members(proc) == []
    finally:
        os.kill(foreign, signal.SIGKILL)


def test_a_reused_pid_is_not_ours(host, tmp_path):
    proc = start(host, tmp_path, code="import time; time.sleep(30)")
    try:
        from dataclasses import replace

        impostor = replace(proc, start_ticks=proc.start_ticks + 1, token="other")
        assert not host.is_alive(impostor)
        assert host.owned_members(impostor) == []
        assert host.stop_group(impostor, 0.1).was_running is False
        assert host.is_alive(proc)
    finally:
        host.stop_group(proc, 1)


def test_port_checks(host):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert not host.port_is_free(port)
    assert host.port_is_free(port)


def test_a_port_whose_old_connections_sit_in_time_wait_is_free(host):
    """A stopped server's closed connections leave its port in TIME_WAIT for a minute; servers bind
    with SO_REUSEADDR, so the port is free for the next one (before this, every trial on the H200
    waited ~60 s for the port)."""
    import socket

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()  # the server side closes first: its end of the connection goes to TIME_WAIT
    time.sleep(0.1)
    client.close()
    server.close()
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # the TIME_WAIT is there: a bind without SO_REUSEADDR fails
    assert host.port_is_free(port)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen()
    try:
        assert not host.port_is_free(port)  # a listening server still holds it
    finally:
        listener.close()


def test_run_python_feeds_stdin_to_the_hosts_python(host):
    result = host.run_python("import sys; print(sys.stdin.read()[::-1])", b"abc", 30)
    assert (result.returncode, result.stdout, result.argv[1:]) == (0, "cba\n", ("-c", "<program>"))


def test_a_server_is_found_by_its_launch_intent_alone_and_stopped(host, tmp_path):
    """A controller killed between the spawn and the record of it knows only its intent (token and
    run folder): that finds the group, main process first; another token finds nothing."""
    ours, other = tmp_path / "ours", tmp_path / "other"
    proc = start(host, ours, token="tok-ours")
    stranger = start(host, other, code="import time\nwhile True: time.sleep(0.1)", token="tok-other")
    try:
        wait_for(lambda: len(host.owned_members(proc)) == 3)
        found = host.find_servers([host.launch_intent(str(ours), "tok-ours"),
                                   host.launch_intent(str(tmp_path / "never"), "tok-never-started")])
        assert [(f.pid, f.pgid, f.start_ticks, f.token) for f in found] == [
            (proc.pid, proc.pgid, proc.start_ticks, "tok-ours")]
        assert found[0].log_path == str(ours / "server.log")
        report = host.stop_group(found[0], grace_s=0.5)
        assert report.was_running and live_group_members(proc.pgid) == []
        assert host.is_alive(stranger)  # not ours by token: never touched
    finally:
        os.killpg(stranger.pgid, signal.SIGKILL)
