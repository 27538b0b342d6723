"""Trace files copied from a host (Host.run lists, Host.read_bytes copies): locally and over a real
OpenSSH server, in chunks, byte for byte; waiting until the writer is done."""

from __future__ import annotations

import os
import threading
import time

import pytest

from sweeper.spec.hosts import HostSpec
from sweeper.hosts.launch_script import build_remote_run_dir
from sweeper.hosts.local import LocalHost
from sweeper.hosts.ssh import SSHHost
from sweeper.profile.fetch import TraceFetchError, fetch_traces, list_files, wait_for_traces


def remote_folder(tmp_path):
    folder = tmp_path / "remote" / "traces"
    (folder / "sub").mkdir(parents=True)
    blobs = {"1.5-TP-0.trace.json.gz": os.urandom(2 * 2**20 + 1234),  # three 1 MiB chunks over SSH
             "1.5-TP-1.trace.json.gz": b"", "sub/w.pt.trace.json.gz": os.urandom(77)}
    for name, data in blobs.items():
        (folder / name).write_bytes(data)
    return folder, blobs


def check_fetch(host, tmp_path):
    folder, blobs = remote_folder(tmp_path)
    files = wait_for_traces(host, str(folder), timeout_s=30, settle_s=0.5)
    assert sorted(f.relpath for f in files) == sorted(blobs)
    local = tmp_path / "local"
    fetched = fetch_traces(host, str(folder), files, local)
    for path in fetched:
        assert path.read_bytes() == blobs[str(path.relative_to(local))]
    assert not list(local.rglob("*.part"))
    assert host.read_bytes(str(folder / "absent.json.gz"), 0) == b""
    big = str(folder / "1.5-TP-0.trace.json.gz")
    assert host.read_bytes(big, len(blobs["1.5-TP-0.trace.json.gz"]) - 10) == blobs["1.5-TP-0.trace.json.gz"][-10:]


def test_fetch_from_the_local_host(tmp_path):
    check_fetch(LocalHost("local", HostSpec(transport="local")), tmp_path)


@pytest.mark.slow
def test_fetch_over_ssh_in_chunks(sshd, ssh_home, tmp_path):
    host = SSHHost("box", HostSpec(**sshd.host_entry(tmp_path / "work")))
    try:
        check_fetch(host, tmp_path)
    finally:
        host.close()


def test_waits_until_a_growing_trace_stops_changing(tmp_path):
    host = LocalHost("local", HostSpec(transport="local"))
    folder = tmp_path / "traces"
    folder.mkdir()
    target = folder / "9-TP-0.trace.json.gz"

    def writer():
        for _ in range(6):
            with open(target, "ab") as out:
                out.write(b"x" * 1000)
            time.sleep(0.2)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        files = wait_for_traces(host, str(folder), timeout_s=30, settle_s=2.0)
    finally:
        thread.join()
    assert [(f.relpath, f.size) for f in files] == [("9-TP-0.trace.json.gz", 6000)]


def test_no_trace_is_a_clear_error_naming_the_folder(tmp_path):
    host = LocalHost("local", HostSpec(transport="local"))
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / ".partial.tmp").write_bytes(b"x")
    with pytest.raises(TraceFetchError, match=r"no complete trace in .*traces.*\.partial\.tmp"):
        wait_for_traces(host, str(tmp_path / "traces"), timeout_s=1.0, settle_s=0.2)
    assert list_files(host, str(tmp_path / "absent")) == []


def test_a_profile_launch_gets_its_own_remote_folder_under_the_trials():
    assert build_remote_run_dir("~/.sweeper", "results/s1/trials/3") == "~/.sweeper/s1/3"
    assert build_remote_run_dir("~/.sweeper", "/r/results/s1/trials/3/profile") == "~/.sweeper/s1/3/profile"
