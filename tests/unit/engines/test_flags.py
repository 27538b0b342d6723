"""Flag checks against an engine's real --help text."""

import subprocess
import sys

from sweeper.engines.flags import flag_problems, parse_help_flags

SGLANG_EXCERPT = """\
usage: launch_server.py [-h] --model-path MODEL_PATH [--tp-size TP_SIZE]
                        [--moe-runner-backend {auto,deep_gemm,triton,marlin}]
                        [--cuda-graph-max-bs-decode CUDA_GRAPH_MAX_BS_DECODE]
options:
  --tp-size TP_SIZE, --tensor-parallel-size TP_SIZE
                        The tensor parallelism size.
  --moe-runner-backend {auto,deep_gemm,triton,marlin}
                        Choose the runner backend for MoE.
"""


def test_parse_flags_and_choices():
    flags = parse_help_flags(SGLANG_EXCERPT)
    assert flags["--moe-runner-backend"] == ["auto", "deep_gemm", "triton", "marlin"]
    assert flags["--tp-size"] is None and "--tensor-parallel-size" in flags and "--model-path" in flags


def test_problems_name_the_flag_the_choice_and_the_replacement():
    flags = parse_help_flags(SGLANG_EXCERPT)
    argv = ["python", "-m", "sglang.launch_server", "--tp-size", "8", "--cuda-graph-max-bs", "16",
            "--moe-runner-backend", "humming", "--model-path=x"]
    problems = flag_problems(argv, flags)
    assert problems == [
        "--cuda-graph-max-bs is not a flag of the installed engine; use --cuda-graph-max-bs-decode "
        "/ --cuda-graph-max-bs-prefill (--cuda-graph-max-bs removed in SGLang 0.5.20)",
        "--moe-runner-backend humming: not one of the installed engine's choices (auto, deep_gemm, triton, marlin)",
    ]


def test_the_simulators_real_help_lists_its_flags():
    text = subprocess.run([sys.executable, "-m", "sweeper.sim", "--help"], capture_output=True,
                          text=True, timeout=60, check=True).stdout
    flags = parse_help_flags(text)
    assert "--mem-fraction-static" in flags and "--time-scale" in flags
    assert "marlin" in flags["--moe-runner-backend"]
    assert flag_problems(["--moe-runner-backend", "marlin", "--tp-size", "8"], flags) == []
