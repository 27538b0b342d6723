"""Command line of the simulated server: SGLang's flag names plus a few `sim`-only flags.

The controller reuses this exact parser to predict a config's performance:
`sim_config_from(parse_args(argv), env)`. Like SGLang: argparse with prefix abbreviations, and an
unknown flag or an invalid choice exits 2 with argparse's message.
"""

from __future__ import annotations

import argparse
from typing import Sequence

from sweeper.sim.config import ATTENTION_BACKENDS, MOE_A2A_BACKENDS, MOE_RUNNER_BACKENDS


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def build_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sweeper.sim",
        description="Simulated SGLang server for DeepSeek-V4-Flash on 8x RTX PRO 6000 (sm_120).",
    )
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--tp-size", "--tensor-parallel-size", "--tp", dest="tp_size", type=int, default=1)
    parser.add_argument("--ep-size", "--expert-parallel-size", "--ep", dest="ep_size", type=int, default=1)
    parser.add_argument("--moe-runner-backend", choices=MOE_RUNNER_BACKENDS, default="auto")
    parser.add_argument("--moe-a2a-backend", choices=MOE_A2A_BACKENDS, default="none")
    parser.add_argument("--attention-backend", choices=ATTENTION_BACKENDS, default=None)
    parser.add_argument("--mem-fraction-static", type=float, default=None)
    parser.add_argument("--disable-cuda-graph", action="store_true")
    parser.add_argument("--cuda-graph-max-bs", type=int, default=None)
    parser.add_argument("--chunked-prefill-size", type=int, default=None)
    parser.add_argument("--max-running-requests", type=int, default=None)
    parser.add_argument("--random-seed", type=int, default=None)
    # The ports SGLang binds besides --port (sim/ports.py binds them as it does)
    parser.add_argument("--nccl-port", type=int, default=None)
    parser.add_argument("--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr", default=None)
    # DP attention as SGLang spells it from 0.5.23 (--enable-dp-attention deprecated; the simulator
    # lacks it, so a space using it meets the flag check's replacement hint)
    parser.add_argument("--attn-dp-size", "--attention-data-parallel-size", dest="attn_dp_size", type=int, default=1)
    parser.add_argument("--disable-radix-cache", action="store_true")  # no prefix cache
    parser.add_argument("--enable-metrics", action="store_true")  # /metrics (Prometheus text)
    # Accepted and ignored, as harness scripts commonly pass them.
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--load-format", default="auto")
    parser.add_argument("--log-level", default="info")

    sim = parser.add_argument_group("simulator only")
    sim.add_argument("--time-scale", type=_positive_float, default=1.0,
                     help="wall seconds per modelled second (0.02 turns a 700 ms step into 14 ms)")
    sim.add_argument("--load-seconds", type=_non_negative_float, default=60.0,
                     help="modelled weight-load time")
    sim.add_argument("--noise", type=_non_negative_float, default=0.02,
                     help="std of per-step speed jitter; the per-launch factor gets half of it")
    sim.add_argument("--launch-noise", type=_non_negative_float, default=None,
                     help="std of the per-launch speed factor (default: half of --noise)")
    sim.add_argument("--run-noise", type=_non_negative_float, default=0.0,
                     help="std of a slow speed factor redrawn every --run-noise-steps steps (within-launch drift)")
    sim.add_argument("--run-noise-steps", type=int, default=200, help="steps between draws of --run-noise")
    sim.add_argument("--hang-after-requests", type=int, default=None,
                     help="stop producing tokens after this many finished requests (an NCCL hang "
                          "mid-load: /health still answers 200)")
    sim.add_argument("--sim-gpus", type=int, default=8, help="GPUs on the simulated host")
    sim.add_argument("--sim-gpu-memory-gb", type=_positive_float, default=96.0, help="memory per GPU")
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    return build_arg_parser().parse_args(None if argv is None else list(argv))
