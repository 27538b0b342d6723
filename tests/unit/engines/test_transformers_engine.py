"""The transformers adapter as data: argv from a config, the served model name, the request dialect
the load generator follows, its flags read from a real `transformers serve --help`, and its failure
signatures on real logs of `transformers serve` (tests/fixtures/transformers/README.md says which
are real captures and which one is hand-written)."""

from __future__ import annotations


import pytest

from sweeper.spec.hosts import HostSpec
from sweeper.spec.space import Workload
from sweeper.spec.space_file import parse_space
from sweeper.engines import get_engine
from sweeper.engines.adapter import classify_log
from sweeper.engines.flags import flag_problems, parse_help_flags
from sweeper.engines.transformers import TRANSFORMERS_SIGNATURES, served_model_path
from sweeper.loadgen.endpoints import RequestDialect, build_request_body
from sweeper.trial.load_ladder import build_level_prompts, build_stream_options
from tests.support.paths import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "transformers"
SHIPPED_SPACE = ROOT / "search_spaces" / "transformers-h200.yaml"

SPACE = """\
name: t
engine: transformers
model: {model}
fixed_flags: {{--device: 'cuda:0', --dtype: bfloat16}}
fixed_env: {{HF_HUB_OFFLINE: '1'}}
parameters:
  continuous_batching: {{type: bool, flag: --continuous-batching}}
  attn: {{type: categorical, choices: [sdpa, eager], flag: --attn-implementation}}
  compile: {{type: bool, flag: --compile}}
  cuda_graph: {{type: bool, flag: --cb-use-cuda-graph, when: {{continuous_batching: true}}}}
  memory: {{type: categorical, choices: [null, 0.3, 0.8], flag: --cb-max-memory-percent, when: {{continuous_batching: true}}}}
  block_size: {{type: categorical, choices: [128, 256], flag: --cb-block-size, when: {{continuous_batching: true}}}}
  max_batch_tokens: {{type: categorical, choices: [null, 2048], flag: --cb-max-batch-tokens, when: {{continuous_batching: true}}}}
  num_blocks: {{type: categorical, choices: [null, 4096], flag: --cb-num-blocks, when: {{continuous_batching: true}}}}
check: {{mode: none}}
"""


def make_space(model: str):
    return parse_space(SPACE.format(model=model), "t.yaml")


def test_argv_is_python_module_serve_model_host_port_then_flags(tmp_path):
    model = tmp_path / "moe"
    model.mkdir()
    space = make_space(str(model))
    config = {"continuous_batching": True, "attn": "sdpa", "compile": False, "cuda_graph": True,
              "memory": 0.3, "block_size": 128, "max_batch_tokens": None, "num_blocks": 4096}
    spec = get_engine("transformers").build_launch_spec(
        space, config, HostSpec(transport="local", env={"CUDA_VISIBLE_DEVICES": "0"}), 31000, "/opt/py")
    assert list(spec.argv) == [
        "/opt/py", "-m", "transformers.cli.transformers", "serve", str(model), "--host", "127.0.0.1",
        "--port", "31000", "--device", "cuda:0", "--dtype", "bfloat16", "--continuous-batching",
        "--attn-implementation", "sdpa", "--cb-use-cuda-graph", "--cb-max-memory-percent", "0.3",
        "--cb-block-size", "128", "--cb-num-blocks", "4096"]
    assert spec.env == {"CUDA_VISIBLE_DEVICES": "0", "HF_HUB_OFFLINE": "1"}


def test_requests_name_the_model_exactly_as_launched(tmp_path, monkeypatch):
    """The server is pinned to its launch argument: a relative folder becomes the same absolute path
    in argv and in every request (the server runs in its trial folder)."""
    (tmp_path / "models" / "moe").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    space = make_space("models/moe")
    engine = get_engine("transformers")
    spec = engine.build_launch_spec(space, {}, HostSpec(transport="local"), 31000, "python")
    assert engine.served_model(space) == str(tmp_path / "models" / "moe") == spec.argv[4]
    assert served_model_path("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"  # a hub id stays as given


def test_load_requests_follow_the_servers_dialect():
    """What a strict `transformers serve` accepts: chat endpoint, text prompts, no ignore_eos, no
    min_tokens (422 otherwise), even when the workload asks for min_tokens."""
    dialect = get_engine("transformers").info.dialect
    options = build_stream_options(Workload(min_tokens=True, continuous_usage_stats=True), dialect)
    assert (options.api, options.ignore_eos, options.min_tokens, options.continuous_usage,
            options.coalesced_stream) == ("chat", False, False, False, True)
    prompts = build_level_prompts(3, 16, seed=1, dialect=dialect)
    assert all(isinstance(p, str) and p for p in prompts)
    body = build_request_body(options.api, "/m", prompts[0], 32, stream=True, ignore_eos=options.ignore_eos,
                              min_tokens=options.min_tokens, continuous_usage=options.continuous_usage)
    assert set(body) == {"model", "messages", "max_tokens", "temperature", "stream", "stream_options"}
    assert body["messages"] == [{"role": "user", "content": prompts[0]}]


def test_sglang_dialect_is_unchanged():
    dialect = get_engine("sglang").info.dialect
    assert dialect == RequestDialect()
    options = build_stream_options(Workload(min_tokens=True), dialect)
    assert (options.api, options.ignore_eos, options.min_tokens, options.coalesced_stream) == \
        ("completions", True, True, False)
    assert all(isinstance(p, list) for p in build_level_prompts(2, 8, seed=0, dialect=dialect))


def test_every_lever_is_a_flag_of_the_real_help():
    known = parse_help_flags((FIXTURES / "serve_help_5.17.txt").read_text())
    for flag in ("--continuous-batching", "--attn-implementation", "--compile", "--dtype", "--device",
                 "--cb-block-size", "--cb-num-blocks", "--cb-max-batch-tokens", "--cb-max-memory-percent",
                 "--cb-use-cuda-graph", "--host", "--port"):
        assert flag in known, flag
    space = make_space("/m")
    config = {"continuous_batching": True, "attn": "eager", "compile": True, "cuda_graph": True,
              "memory": 0.8, "block_size": 256, "max_batch_tokens": 2048, "num_blocks": 4096}
    spec = get_engine("transformers").build_launch_spec(space, config, HostSpec(transport="local"), 1, "python")
    assert flag_problems(spec.argv, known) == []
    assert flag_problems(["--cb-cuda-graph"], known) == ["--cb-cuda-graph is not a flag of the installed engine"]


def test_shipped_h200_space_fits_the_real_help():
    from sweeper.spec.space_file import load_space

    space = load_space(SHIPPED_SPACE)
    assert space.engine == "transformers" and space.workload.concurrency == [1, 2, 4, 8, 16]
    known = parse_help_flags((FIXTURES / "serve_help_5.17.txt").read_text())
    engine = get_engine("transformers")
    for seed in space.seeds:
        spec = engine.build_launch_spec(space, seed.params, HostSpec(transport="local"), 1, "python")
        assert flag_problems(spec.argv, known) == [], seed.name


@pytest.mark.parametrize("log, kind", [
    ("flash_attn_missing.log", "unsupported"),
    ("bad_dtype.log", "invalid_argument"),
    ("unknown_flag.log", "invalid_argument"),
    ("port_busy.log", "port_busy"),
    ("model_missing.log", "model_missing"),
    ("compile_failed.log", "compile_failed"),
    ("h200_oom.log", "oom"),
])
def test_failure_logs_are_classified(log, kind):
    signature = classify_log((FIXTURES / log).read_text(), TRANSFORMERS_SIGNATURES)
    assert signature is not None and signature.kind == kind, signature


def test_a_healthy_start_matches_no_failure_signature():
    assert classify_log((FIXTURES / "healthy_start.log").read_text(), TRANSFORMERS_SIGNATURES) is None


@pytest.mark.parametrize("excerpt, kind", [
    # a compile failure caused by OOM is an OOM: fix the memory, not the compiler
    ("torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB.", "oom"),
    ("RuntimeError: CUDA error: operation not permitted when stream is capturing", "cuda_graph_capture"),
    ("transformers.cli.serving.utils.CBWorkerDeadError: CB worker died during request abc: boom", "cb_worker_dead"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda_error"),
])
def test_most_specific_signature_wins(excerpt, kind):
    assert classify_log(excerpt, TRANSFORMERS_SIGNATURES).kind == kind
