"""Search spaces the CLI tests sweep, as YAML text, and finding a line in one.

A test that names a line of one of these shared texts finds it with `line_of`, so a comment added
here moves no test; line numbers written down belong to files a test builds itself."""

from __future__ import annotations

# A small, fast version of the demo space: same engine, same failure modes, fewer levels.
TINY_SPACE = """\
name: tiny
engine: sim
model: deepseek-ai/DeepSeek-V4-Flash
fixed_flags: {--time-scale: 0.01, --load-seconds: 30}
parameters:
  tp_size: {type: categorical, choices: [4, 8], flag: --tp-size}
  ep_size: {type: categorical, choices: [1, 8], flag: --ep-size}
  moe_runner_backend: {type: categorical, choices: [marlin, flashinfer_mxfp4, triton], flag: --moe-runner-backend}
  moe_a2a_backend: {type: categorical, choices: [none, deepep], flag: --moe-a2a-backend}
  nccl_proto: {type: categorical, choices: [LL, Simple], env: NCCL_PROTO}
constraints:
  - ep_size <= tp_size
seeds:
  - name: baseline
    params: {tp_size: 8, ep_size: 1, moe_runner_backend: marlin, moe_a2a_backend: none, nccl_proto: Simple}
  - name: garbage
    params: {tp_size: 8, ep_size: 8, moe_runner_backend: triton, moe_a2a_backend: none, nccl_proto: LL}
  - name: deepep
    params: {tp_size: 8, ep_size: 8, moe_runner_backend: marlin, moe_a2a_backend: deepep, nccl_proto: LL}
  - name: rule
    params: {tp_size: 4, ep_size: 8, moe_runner_backend: marlin, moe_a2a_backend: none, nccl_proto: LL}
reference: baseline
# output_len 32: a request lasts ~65 ms at this time scale, so the client's own turnaround between
# requests (~0.5 ms: its wake-up, measured from the kernel's receive stamp) stays well inside the 5%
# that achieved concurrency may miss, also on a busy 2-core runner with sshd and the on-host client.
workload: {input_len: 64, output_len: 32, concurrency: [1, 4], min_rounds: 2, warmup_rounds: 1}
budget: {trials: 5}
launch: {ready_timeout_s: 60, stall_timeout_s: 5, stop_grace_s: 5}
"""

# The tiny space with only the baseline seed: a retried trial runs right after the one it retries.
ONE_SEED_SPACE = (TINY_SPACE.split("  - name: garbage")[0] + "reference: baseline\n"
                  + TINY_SPACE.split("reference: baseline\n")[1])


# The tiny space for `sweeper campaign`: slowed (longer requests keep achieved concurrency up on a
# busy 2-core machine) with a short weight load (at 0.03 a 30 s load made each start 2.4 s, 5 s 1.6 s), the client-lag bar lenient (the shared machine lags the client), a target
# for the gap, and a budget that leaves two feasible finalists (baseline, deepep) after the garbage seed.
CAMPAIGN_SPACE = (TINY_SPACE.replace("--time-scale: 0.01, --load-seconds: 30", "--time-scale: 0.03, --load-seconds: 5")
                  .replace("warmup_rounds: 1}", "warmup_rounds: 1, max_client_lag_ms: 50}")
                  .replace("budget: {trials: 5}", "budget: {trials: 6}\ntarget: {metric: output_throughput, value: 1000, level: 4}"))


def line_of(text: str, needle: str) -> int:
    """The 1-based number of the first line of `text` that contains `needle`."""
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)
