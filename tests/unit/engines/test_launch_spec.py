"""Engine adapters are pure: a config becomes an argv list and an environment."""

from sweeper.spec.hosts import HostSpec
from sweeper.spec.space_file import parse_space
from sweeper.engines import get_engine
from sweeper.engines.adapter import classify_log
from sweeper.engines.sglang import SGLANG_SIGNATURES

SPACE = parse_space("""\
name: t
engine: sglang
model: deepseek-ai/DeepSeek-V4-Flash
fixed_flags: {--trust-remote-code: true, --load-format: dummy, --skip: false}
fixed_env: {SGL_FORCE_SHUTDOWN: "1", NCCL_DEBUG: WARN}
parameters:
  tp_size: {type: categorical, choices: [4, 8], flag: --tp-size}
  disable_cuda_graph: {type: bool, flag: --disable-cuda-graph}
  mem: {type: float, low: 0.5, high: 0.9, flag: --mem-fraction-static}
  proto: {type: categorical, choices: [LL, Simple], env: NCCL_PROTO}
  p2p: {type: bool, env: NCCL_P2P_DISABLE}
""", "inline")
HOST = HostSpec(transport="local", env={"HF_HOME": "/data/hf", "NCCL_DEBUG": "INFO"})


def test_sglang_argv_and_env():
    config = {"tp_size": 8, "disable_cuda_graph": True, "mem": 0.7, "proto": "LL", "p2p": False}
    spec = get_engine("sglang").build_launch_spec(SPACE, config, HOST, 30010, "/venv/bin/python")
    assert list(spec.argv) == [
        "/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V4-Flash",
        "--host", "127.0.0.1", "--port", "30010", "--trust-remote-code", "--load-format", "dummy",
        "--tp-size", "8", "--disable-cuda-graph", "--mem-fraction-static", "0.7",
    ]
    # the space's fixed env overrides the host's; parameters override both
    assert spec.env == {"HF_HOME": "/data/hf", "NCCL_DEBUG": "WARN", "SGL_FORCE_SHUTDOWN": "1",
                        "NCCL_PROTO": "LL", "NCCL_P2P_DISABLE": "0"}
    assert spec.port == 30010


def test_false_bool_flag_is_absent():
    spec = get_engine("sglang").build_launch_spec(SPACE, {"tp_size": 4, "disable_cuda_graph": False}, HOST, 1, "py")
    assert "--disable-cuda-graph" not in spec.argv and "--skip" not in spec.argv


def test_sim_is_started_like_sglang():
    spec = get_engine("sim").build_launch_spec(SPACE, {"tp_size": 4}, HOST, 1, "py")
    assert spec.argv[:3] == ("py", "-m", "sweeper.sim")
    assert get_engine("sim").clock_scale(SPACE) == 1.0


def test_failure_signatures_on_log_excerpts():
    excerpts = {
        "[2026-11-29 10:00:01 TP0] Capture cuda graph failed: CUDA error: an illegal memory access": "cuda_graph_capture",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.": "not_enough_memory",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB": "oom",
        "AssertionError: DeepEP is only supported on sm_90/sm_100": "unsupported",
        "[2026-11-29 10:00:01] Received sigquit from a child process. It usually means the child failed.": "child_crash",
        "everything is fine\nThe server is fired up and ready to roll!": None,
    }
    for text, kind in excerpts.items():
        found = classify_log(text, SGLANG_SIGNATURES)
        assert (found.kind if found else None) == kind, text


VLLM_SPACE = parse_space("""\
name: v
engine: vllm
model: Qwen/Qwen3-30B-A3B
fixed_flags: {--max-model-len: 4096}
parameters:
  tp: {type: categorical, choices: [1, 2], flag: --tensor-parallel-size}
  ep: {type: bool, flag: --enable-expert-parallel}
  util: {type: float, low: 0.8, high: 0.95, flag: --gpu-memory-utilization}
  algo: {type: categorical, choices: [Ring], env: NCCL_ALGO}
""", "inline")


def test_vllm_serve_argv_env_readiness_and_probes():
    engine = get_engine("vllm")
    spec = engine.build_launch_spec(VLLM_SPACE, {"tp": 2, "ep": True, "util": 0.9, "algo": "Ring"}, HOST, 8010, "py")
    assert list(spec.argv) == [
        "py", "-m", "vllm.entrypoints.cli.main", "serve", "Qwen/Qwen3-30B-A3B", "--host", "127.0.0.1",
        "--port", "8010", "--max-model-len", "4096", "--tensor-parallel-size", "2", "--enable-expert-parallel",
        "--gpu-memory-utilization", "0.9"]
    assert spec.env["NCCL_ALGO"] == "Ring" and spec.env["HF_HOME"] == "/data/hf"
    assert engine.info.readiness.health_path == "/health"
    assert engine.help_argv("py") == ["py", "-m", "vllm.entrypoints.cli.main", "serve", "--help=all"]
    assert engine.version_argv("py")[-1] == "vllm"
