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
