"""Pure performance model of DeepSeek-V4-Flash (FP4 experts) on 8x RTX PRO 6000 (sm_120), SGLang.

No I/O, no clock, no randomness: every function is a deterministic function of a `SimConfig`.
Calibrated on the case study (/work/shared/seed): BASELINE (tp=8, ep=1, marlin, a2a none, triton
attention, CUDA graphs on, mem 0.70) decodes at ~94 ms/step at batch 1 and ~700 ms/step at
batch 16, where the sm_120 fallback `_tiled_sparse_decode_kernel` (attention) is 63% of the step.

Decode step = attention + moe + dense + communication + launch_overhead (ms, summed over layers):

- attention = (30 + 25.69*b) * backend * (8/tp)**0.15. Backend: triton/auto 1.0, flashinfer 1.1,
  flex_attention 1.3, torch_native 1.5. Larger tp helps a little (latency-bound SIMT kernel).
  No lever in the space removes it: it is the ceiling.
- moe = backend * [E(b)/ep * (L + W*ep/tp) + 1.88*b], E(b) = 256*(1-(1-8/256)**b) distinct
  experts touched by b tokens (top-8 of 256). L = 1.131 ms per expert-slice launch/latency,
  W = 4.83 ms per full expert read. TP slices every touched expert tp ways (pays L per expert on
  every GPU); EP gives each GPU E/ep whole experts, so it pays off once many experts are touched.
  Backend: marlin 1.0, flashinfer_mxfp4 (= auto) 0.96; non-FP4 backends 1.0 (they are garbage).
- dense = (18.49 + 1.157*b) * (8/tp)**0.5: projections, indexer, mHC, norms.
- communication = TP all-reduce (1.093 + 0.807*b) * (tp-1)/7 * nccl, ~2% of a baseline step,
  plus, when ep > 1, the token dispatch (4.5 + 0.75*ep + 0.05*b) * nccl ("none" a2a: NCCL
  gather/scatter) or * 0.7 (flashinfer a2a, not NCCL). nccl = proto (LL 0.97, LL128 0.99,
  Simple 1.04) * algo (Ring 0.99, Tree 1.02) * P2P (NCCL_P2P_DISABLE=1: 1.05): < 0.2% of a step.
- launch_overhead = 1.0 with a captured CUDA graph (graphs on and b <= cuda_graph_max_bs), else
  5.5 + 0.05*b: graphs are worth ~5% at b=1 and <1% at b=16.

Prefill of n tokens = ceil(n/chunk) passes * 40 ms + n * 0.25 ms * (0.6*attention factor + 0.4*
moe backend factor) (chunk = chunked_prefill_size, default 8192; -1 = one pass). 2048 tokens:
~0.55 s against ~21.7 s of decode for 32-token outputs at C=16.

Step time (ms) by decode batch b:

    b              1      2      4      8     16
    BASELINE    94.0  137.0  221.7  386.4  700.0
    OPTIMUM     95.8  130.8  200.4  337.5  605.1

    closed-loop output tok/s, input 128, output 32, at C = 1, 2, 4, 8, 16:
    BASELINE    10.72  14.71  18.18  20.85  23.01
    OPTIMUM     10.52  15.39  20.07  23.81  26.53

OPTIMUM (best at C=16) = tp=8, ep=8, flashinfer_mxfp4 (or auto), a2a none, triton, graphs on,
NCCL_PROTO=LL, NCCL_ALGO=Ring: ~38x short of the 1,000 tok/s target. EP costs ~2% at b=1
(dispatch) and wins ~15% at b=16, so at C=1 ep=1 is (slightly) better.

Throughput model (what the simulated server's scheduler does, see scheduler.py): a closed loop
of C same-length requests runs in lockstep rounds of b = min(C, max_running_requests) requests:
one prefill pass over b*input_len tokens (it emits each request's first token), then
output_len-1 decode steps at batch b. Requests beyond b wait in the queue for a later round.
Failing configs (startup/load/capture crash or hang) model 0.0 tok/s; garbage configs model the
speed they really serve at (fast but wrong: `failure_of` flags them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sweeper.sim.config import SimConfig, sim_config_from
from sweeper.sim.failures import SimFailure, failure_of, serves_requests

__all__ = [
    "BASELINE", "OPTIMUM", "LevelMetrics", "SimConfig", "SimFailure", "active_experts",
    "decode_batch_size", "failure_of", "modelled_level_metrics", "modelled_output_throughput",
    "prefill_time_ms", "round_time_ms", "sim_config_from", "step_breakdown_ms", "step_time_ms",
]

N_EXPERTS = 256
TOP_K = 8

# Attention (sm_120 fallback sparse-MLA decode): fixed + per-running-request cost at tp=8.
ATTN_FIXED_MS = 30.0
ATTN_PER_REQ_MS = 25.6875
ATTN_TP_EXPONENT = 0.15
ATTENTION_FACTOR = {"triton": 1.0, "flashinfer": 1.1, "flex_attention": 1.3, "torch_native": 1.5}

# MoE slot-GEMV: per touched expert-slice latency, per full-expert read, per token routing.
MOE_SLICE_LATENCY_MS = 1.131
MOE_EXPERT_READ_MS = 4.83
MOE_PER_TOKEN_MS = 1.88
MOE_FACTOR = {"marlin": 1.0, "flashinfer_mxfp4": 0.96}

DENSE_FIXED_MS = 18.49
DENSE_PER_REQ_MS = 1.157

ALLREDUCE_FIXED_MS = 1.093
ALLREDUCE_PER_REQ_MS = 0.807
DISPATCH_FIXED_MS = 4.5
DISPATCH_PER_EP_MS = 0.75
DISPATCH_PER_REQ_MS = 0.05
FLASHINFER_A2A_FACTOR = 0.7
NCCL_PROTO_FACTOR = {"LL": 0.97, "LL128": 0.99, "Simple": 1.04}
NCCL_ALGO_FACTOR = {"Ring": 0.99, "Tree": 1.02}
NCCL_P2P_DISABLED_FACTOR = 1.05

LAUNCH_GRAPH_MS = 1.0
LAUNCH_EAGER_MS = 5.5
LAUNCH_EAGER_PER_REQ_MS = 0.05

PREFILL_PASS_MS = 40.0
PREFILL_PER_TOKEN_MS = 0.25

BASELINE = SimConfig(tp_size=8, ep_size=1, moe_runner_backend="marlin", moe_a2a_backend="none",
                     attention_backend="triton", mem_fraction_static=0.70)
OPTIMUM = SimConfig(tp_size=8, ep_size=8, moe_runner_backend="flashinfer_mxfp4", moe_a2a_backend="none",
                    attention_backend="triton", mem_fraction_static=0.70, nccl_proto="LL", nccl_algo="Ring")


def active_experts(batch: int) -> float:
    """Expected number of distinct experts touched by `batch` tokens routed top-8 of 256."""
    return N_EXPERTS * (1.0 - (1.0 - TOP_K / N_EXPERTS) ** batch)


def _mean_factor(value: str | None, table: dict[str, float]) -> float:
    """NCCL accepts comma lists; unknown names are ignored by NCCL (factor 1)."""
    if not value:
        return 1.0
    names = [name.strip() for name in value.split(",") if name.strip()]
    return sum(table.get(name, 1.0) for name in names) / len(names) if names else 1.0


def nccl_factor(cfg: SimConfig) -> float:
    p2p = NCCL_P2P_DISABLED_FACTOR if cfg.nccl_p2p_disable == "1" else 1.0
    return _mean_factor(cfg.nccl_proto, NCCL_PROTO_FACTOR) * _mean_factor(cfg.nccl_algo, NCCL_ALGO_FACTOR) * p2p


def attention_factor(cfg: SimConfig) -> float:
    backend = ATTENTION_FACTOR.get(cfg.effective_attention_backend, 1.0)
    return backend * (8.0 / cfg.tp_size) ** ATTN_TP_EXPONENT


def moe_factor(cfg: SimConfig) -> float:
    return MOE_FACTOR.get(cfg.effective_moe_runner_backend, 1.0)


def uses_graph_at(cfg: SimConfig, batch: int) -> bool:
    return cfg.uses_cuda_graphs and batch <= cfg.effective_cuda_graph_max_bs


def step_breakdown_ms(cfg: SimConfig, batch: int) -> dict[str, float]:
    """One decode step for `batch` running requests, split into its parts (ms).

    `batch` is the number of running requests; the caller caps it by max_running_requests
    (see decode_batch_size). Valid for any config shape, failing ones included.
    """
    b = max(int(batch), 1)
    tp = max(cfg.tp_size, 1)
    ep = max(cfg.ep_size, 1)
    attention = (ATTN_FIXED_MS + ATTN_PER_REQ_MS * b) * attention_factor(cfg)
    experts_per_gpu = active_experts(b) / ep
    moe = moe_factor(cfg) * (experts_per_gpu * (MOE_SLICE_LATENCY_MS + MOE_EXPERT_READ_MS * ep / tp)
                             + MOE_PER_TOKEN_MS * b)
    dense = (DENSE_FIXED_MS + DENSE_PER_REQ_MS * b) * (8.0 / tp) ** 0.5
    nccl = nccl_factor(cfg)
    communication = (ALLREDUCE_FIXED_MS + ALLREDUCE_PER_REQ_MS * b) * (tp - 1) / 7.0 * nccl
    if ep > 1:
        dispatch = DISPATCH_FIXED_MS + DISPATCH_PER_EP_MS * ep + DISPATCH_PER_REQ_MS * b
        communication += dispatch * (FLASHINFER_A2A_FACTOR if cfg.moe_a2a_backend == "flashinfer" else nccl)
    if uses_graph_at(cfg, b):
        launch = LAUNCH_GRAPH_MS
    else:
        launch = LAUNCH_EAGER_MS + LAUNCH_EAGER_PER_REQ_MS * b
    return {"attention": attention, "moe": moe, "dense": dense,
            "communication": communication, "launch_overhead": launch}


def step_time_ms(cfg: SimConfig, batch: int) -> float:
    """Decode step time (ms) with `batch` running requests."""
    return sum(step_breakdown_ms(cfg, batch).values())


def prefill_time_ms(cfg: SimConfig, n_tokens: int) -> float:
    """One prefill of `n_tokens` new tokens, chunked by chunked_prefill_size (ms)."""
    n = max(int(n_tokens), 1)
    chunk = cfg.effective_prefill_chunk
    passes = 1 if chunk is None or chunk < 1 else math.ceil(n / chunk)
    per_token = PREFILL_PER_TOKEN_MS * (0.6 * attention_factor(cfg) + 0.4 * moe_factor(cfg))
    return passes * PREFILL_PASS_MS + n * per_token


def decode_batch_size(cfg: SimConfig, concurrency: int) -> int:
    """Requests decoding together when `concurrency` are in flight."""
    return max(1, min(int(concurrency), cfg.effective_max_running))


def round_time_ms(cfg: SimConfig, input_len: int, output_len: int, batch: int) -> float:
    """One lockstep round: prefill of the whole batch, then output_len-1 decode steps."""
    return prefill_time_ms(cfg, batch * input_len) + (max(output_len, 1) - 1) * step_time_ms(cfg, batch)


@dataclass(frozen=True)
class LevelMetrics:
    """Modelled steady-state metrics of one closed-loop concurrency level (bench_serving terms)."""

    concurrency: int
    output_throughput: float  # tok/s
    request_throughput: float  # req/s
    ttft_ms: float
    itl_ms: float
    tpot_ms: float
    e2e_latency_ms: float


def modelled_level_metrics(cfg: SimConfig, input_len: int, output_len: int, concurrency: int) -> LevelMetrics:
    """Steady-state closed-loop metrics in modelled time; zeros when the config never serves."""
    if not serves_requests(cfg) or concurrency < 1:
        return LevelMetrics(concurrency, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    batch = decode_batch_size(cfg, concurrency)
    round_ms = round_time_ms(cfg, input_len, output_len, batch)
    # Requests beyond the batch wait (concurrency-batch)/batch rounds in the queue on average.
    queue_ms = (concurrency - batch) / batch * round_ms
    ttft = queue_ms + prefill_time_ms(cfg, batch * input_len)
    itl = step_time_ms(cfg, batch) if output_len > 1 else 0.0
    e2e = ttft + (max(output_len, 1) - 1) * itl
    return LevelMetrics(
        concurrency=concurrency,
        output_throughput=batch * output_len / round_ms * 1000.0,
        request_throughput=batch / round_ms * 1000.0,
        ttft_ms=ttft, itl_ms=itl, tpot_ms=itl, e2e_latency_ms=e2e,
    )


def modelled_output_throughput(cfg: SimConfig, input_len: int, output_len: int, concurrency: int) -> float:
    """Output tok/s (modelled time) of a closed loop at `concurrency`; 0.0 if the config never serves."""
    return modelled_level_metrics(cfg, input_len, output_len, concurrency).output_throughput
