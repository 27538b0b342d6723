import os

from sweeper.hosts.procfs import environ_has, parse_stat, read_stat
from sweeper.redact import redact_env, redact_url


def test_parse_stat_with_spaces_and_parens_in_name():
    line = "4242 (python -m (sim)) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 1 0 0 20 0 3 0 987654 1000 10"
    stat = parse_stat(line)
    assert (stat.pid, stat.state, stat.pgid, stat.start_ticks) == (4242, "S", 4242, 987654)


def test_read_own_stat():
    stat = read_stat(os.getpid())
    assert stat.pid == os.getpid() and stat.pgid == os.getpgid(0) and stat.start_ticks > 0


def test_environ_match_is_exact():
    env = b"A=1\0SWEEPER_RUN_TOKEN=abc\0B=2\0"
    assert environ_has(env, "SWEEPER_RUN_TOKEN", "abc")
    assert not environ_has(env, "SWEEPER_RUN_TOKEN", "ab")


def test_secrets_redacted():
    assert redact_env({"HF_TOKEN": "hf_x", "NCCL_PROTO": "LL", "MY_API_KEY": "k"}) == {
        "HF_TOKEN": "***", "NCCL_PROTO": "LL", "MY_API_KEY": "***"}
    assert redact_url("postgresql+psycopg://bob:s3cret@db:5432/x") == "postgresql+psycopg://bob:***@db:5432/x"
    assert redact_url("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"


def test_listening_inodes_from_proc_net_tcp():
    from sweeper.hosts.procfs import parse_listening_inodes

    text = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:7A18 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1\n"
        "   1: 0100007F:7A18 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 222 1\n"
        "   2: 0100007F:7A19 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 333 1\n"
    )
    assert parse_listening_inodes(text, 0x7A18) == {111}  # listening only, not the connection


def test_still_running_waits_for_a_process_that_lost_its_token(tmp_path):
    """An exiting process (state R, environ already empty) is still there: a stop waits for it;
    a zombie, a pid gone, or a pid reused by another group are not ours to wait for."""
    from sweeper.hosts.procfs import still_running

    def fake(pid, state, pgid):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(
            f"{pid} (sim) {state} 1 {pgid} {pgid} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 555 1000 10")
        (tmp_path / str(pid) / "environ").write_bytes(b"")

    fake(10, "R", 10)  # exiting: no environ, still running
    fake(11, "Z", 10)  # a zombie
    fake(12, "S", 99)  # the pid now belongs to someone else's group
    assert still_running([10, 11, 12, 13], 10, tmp_path) == [10]
