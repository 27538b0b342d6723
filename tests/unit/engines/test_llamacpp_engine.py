"""The llamacpp adapter as data: argv from a config, the binary's path, failure signatures on
llama-server's real log lines (tests/fixtures/llamacpp/*.log), and its --help read for preflight."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sweeper.spec.hosts import HostSpec
from sweeper.spec.space_file import parse_space
from sweeper.engines import get_engine
from sweeper.engines.adapter import classify_log
from sweeper.engines.flags import flag_problems, parse_help_flags
from sweeper.engines.llamacpp import (
    BINARY_ENV, LLAMACPP_SIGNATURES, default_llama_server_path, llama_server_path,
)
from tests.support.paths import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "llamacpp"

SPACE = """\
name: t
engine: llamacpp
model: models/m.gguf
fixed_flags: {--no-warmup: true, -c: 4096}
parameters:
  threads: {type: categorical, choices: [1, 2], flag: -t}
  parallel: {type: categorical, choices: [1, 16], flag: -np}
  no_cont_batching: {type: bool, flag: -nocb}
  cache_type: {type: categorical, choices: [f16, q8_0], flag: -ctk}
derived:
  cache_type_v: {expr: cache_type, flag: -ctv}
check: {mode: none}
"""


def test_argv_is_the_binary_then_model_host_port_then_flags(monkeypatch, tmp_path):
    monkeypatch.setenv(BINARY_ENV, "/opt/llama-server")
    monkeypatch.chdir(tmp_path)
    space = parse_space(SPACE, "t.yaml")
    config = {"threads": 2, "parallel": 16, "no_cont_batching": True, "cache_type": "q8_0", "cache_type_v": "q8_0"}
    spec = get_engine("llamacpp").build_launch_spec(space, config, HostSpec(transport="local"), 31000, "python")
    assert list(spec.argv) == [
        "/opt/llama-server", "--model", str(tmp_path / "models/m.gguf"), "--host", "127.0.0.1", "--port", "31000",
        "--no-warmup", "-c", "4096", "-t", "2", "-np", "16", "-nocb", "-ctk", "q8_0", "-ctv", "q8_0"]
    assert space.check.mode == "none"


def test_binary_path_env_then_the_build_scripts_cache(monkeypatch):
    assert llama_server_path({BINARY_ENV: "/x/llama-server", "HOME": "/h"}) == "/x/llama-server"
    assert llama_server_path({"HOME": "/h"}) == "/h/.cache/sweeper/llama.cpp/0.3.36/bin/llama-server"
    assert default_llama_server_path({"XDG_CACHE_HOME": "/c", "HOME": "/h"}) == \
        Path("/c/sweeper/llama.cpp/0.3.36/bin/llama-server")
    monkeypatch.setenv("HOME", "/h")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    script = subprocess.run([str(ROOT / "scripts/build_llama_server.sh"), "--path"], capture_output=True,
                            text=True, check=True)
    assert script.stdout.strip() == str(default_llama_server_path())  # one version, one place


@pytest.mark.parametrize("log, kind, substring", [
    ("missing_model.log", "model_missing", "failed to open GGUF file"),
    ("corrupt_model.log", "model_load", "error loading model"),
    ("context_too_large.log", "oom", "insufficient memory (attempted to allocate"),
    ("ggml_assert.log", "ggml_assert", "GGML_ASSERT("),
    ("port_busy.log", "port_busy", "couldn't bind HTTP server socket"),
    ("quantized_v_without_fa.log", "unsupported", "quantized V cache requires flash_attn"),
    ("invalid_argument.log", "invalid_argument", "invalid argument:"),
])
def test_each_failure_is_classified_from_the_servers_own_lines(log, kind, substring):
    signature = classify_log((FIXTURES / log).read_text(), LLAMACPP_SIGNATURES)
    assert signature is not None and (signature.kind, signature.substring) == (kind, substring)


@pytest.mark.parametrize("line, kind", [
    ("E llama_model_load: error loading model: unable to allocate CPU buffer", "oom"),
    ("E llama_init_from_model: failed to initialize the context: std::bad_alloc", "oom"),
    ("E llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache", "oom"),
    ("E alloc_tensor_range: failed to allocate CPU buffer of size 68719476736", "oom"),
    ("E cmn  common_init_: failed to create context with model '/m.gguf'", "context_init"),
    ("E srv  llama_server: exiting due to model loading error", "model_load"),
])
def test_single_lines_of_the_other_signatures(line, kind):
    assert classify_log(line, LLAMACPP_SIGNATURES).kind == kind


def test_a_healthy_start_matches_no_signature():
    healthy = ("0.00.003.879 I srv    load_model: loading model '/m.gguf'\n"
               "0.00.041.002 W llama_context: n_ctx_seq (4096) > n_ctx_train (2048) -- possible training context overflow\n"
               "0.00.300.000 I srv  llama_server: server is listening on http://127.0.0.1:31000\n")
    assert classify_log(healthy, LLAMACPP_SIGNATURES) is None


def test_help_gives_short_and_long_flags_and_a_removed_flag_is_refused():
    flags = parse_help_flags((FIXTURES / "help_excerpt.txt").read_text())
    for flag in ("-t", "--threads", "-np", "--parallel", "-nocb", "-cb", "-fa", "-ctk", "-ctv", "-m", "-lm"):
        assert flag in flags, flag
    argv = ["/bin/llama-server", "-m", "m.gguf", "-t", "2", "-np", "4", "-fa", "on", "-zz", "-1"]
    assert flag_problems(argv, flags, short=True) == ["-zz is not a flag of the installed engine"]
    assert flag_problems(argv + ["--mlock"], flags, short=True)[-1] == \
        "--mlock is not a flag of the installed engine; use -lm/--load-mode mlock (--mlock removed in llama.cpp)"
    # without `short` (python -m launchers), single-dash items are not flags of the engine
    assert flag_problems(["python", "-m", "sglang.launch_server", "--threads", "2"], flags) == []
