"""The vocabulary every stage shares, typed once: where a trial failed (Stage), how (FailureKind),
the metrics a level reports (LevelMetrics) and the names an objective may read (MetricName).

Both enums are StrEnums, so a stored record (JSON in the study, outcome.json) holds plain strings
and old studies read back unchanged."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, TypedDict, get_args


class Stage(StrEnum):
    PREFLIGHT = "preflight"
    LAUNCH = "launch"
    WAIT_READY = "wait_ready"
    CHECK_OUTPUT = "check_output"
    LOAD = "load"
    STOP = "stop"


class FailureKind(StrEnum):
    # preflight: the config is refused before anything starts
    RULE = "rule"
    CONSTRAINT = "constraint"
    UNSUPPORTED_FLAG = "unsupported_flag"
    TOO_MANY_GPUS = "too_many_gpus"  # its parallel sizes need more GPUs than the host's `gpus:`
    # start-up, from the engine's own log lines (engines/*.py signatures) or its exit
    INVALID_ARGUMENT = "invalid_argument"
    INVALID_PARALLEL = "invalid_parallel"
    UNSUPPORTED = "unsupported"
    MISSING_DEPENDENCY = "missing_dependency"
    MODEL_MISSING = "model_missing"
    MODEL_LOAD = "model_load"
    NOT_ENOUGH_MEMORY = "not_enough_memory"
    KV_CACHE_TOO_SMALL = "kv_cache_too_small"
    GPUS_NOT_CLEAN = "gpus_not_clean"
    MEMORY_UTILIZATION_TOO_HIGH = "memory_utilization_too_high"  # more than the GPU has free
    OOM = "oom"
    CUDA_ERROR = "cuda_error"
    CUDA_GRAPH_CAPTURE = "cuda_graph_capture"
    COMPILE_FAILED = "compile_failed"
    TRITON_SHARED_MEMORY = "triton_shared_memory"
    CONTEXT_INIT = "context_init"
    GGML_ASSERT = "ggml_assert"
    CB_WORKER_DEAD = "cb_worker_dead"
    NCCL = "nccl"
    PORT_BUSY = "port_busy"
    CHILD_CRASH = "child_crash"
    CRASH = "crash"  # exited during start-up with no known line
    TIMEOUT = "timeout"
    HANG = "hang"
    # the correctness gate
    BAD_OUTPUT = "bad_output"
    GARBAGE_OUTPUT = "garbage_output"
    GENERATION_ERROR = "generation_error"
    # under load and after
    CRASH_UNDER_LOAD = "crash_under_load"
    INVALID_MEASUREMENT = "invalid_measurement"
    SLO = "slo"
    ABANDONED = "abandoned"  # a partial ladder stopped: it could not catch the incumbent
    STOP_FAILED = "stop_failed"


# Failures that judge the host the trial was to run on, not the config: on another host (many
# hosts, a warm start) the config is judged again, never copied as broken.
HOST_BOUND_KINDS = frozenset({FailureKind.TOO_MANY_GPUS})


ThroughputMetric = Literal["output_throughput", "total_throughput", "request_throughput"]
# Fair comparisons (maximised, like a throughput): per GPU the config uses, and per user (1 / TPOT)
FairnessMetric = Literal["output_throughput_per_gpu", "output_throughput_per_user"]
PER_GPU_METRIC = "output_throughput_per_gpu"  # needs each config's GPU count (space `gpus:` or the engine's)
LatencyMetric = Literal["median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms", "median_e2e_latency_ms"]
# The SLO capacity objective (loadgen/capacity.py): the highest load within the space's `slo:`.
CapacityMetric = Literal["max_load_within_slo"]
CAPACITY_METRIC = "max_load_within_slo"
MetricName = Literal[ThroughputMetric, FairnessMetric, LatencyMetric, CapacityMetric]
THROUGHPUT_METRICS: tuple[str, ...] = get_args(ThroughputMetric)
FAIRNESS_METRICS: tuple[str, ...] = get_args(FairnessMetric)
LATENCY_METRICS: tuple[str, ...] = get_args(LatencyMetric)


class LevelMetrics(TypedDict, total=False):
    """One load level's summary (loadgen/metrics.summarize_level, bench_serving's definitions;
    durations in modelled seconds, latencies in modelled ms). Stored per level in the study."""

    duration: float
    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    total_streamed_tokens: int
    request_throughput: float
    input_throughput: float
    output_throughput: float
    total_throughput: float
    request_goodput: float | None
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    # {mean,median,std,p90,p95,p99}_{ttft,itl,tpot,e2e_latency}_ms, as percentile_summary writes them
    mean_ttft_ms: float
    median_ttft_ms: float
    p99_ttft_ms: float
    mean_itl_ms: float
    median_itl_ms: float
    p99_itl_ms: float
    median_tpot_ms: float
    median_e2e_latency_ms: float
    concurrency: float  # achieved
    max_concurrent_requests: int | None  # the target (None: open loop)
    achieved_request_rate: float | None  # open loop: requests/s actually sent (loadgen/ladder.py)
    time_scale: float
    client_lag_median_ms: float | None
    client_lag_p99_ms: float | None
    client_lag_max_ms: float | None
    total_chunks: int
    tokens_per_chunk: float
    coarse_stream: bool
    chunk_tokens_estimated: int
    stream_notes: list[str]
    # run_ladder adds: how prompts went ("text" or "token ids"), requests beyond the dataset's
    # size (None without one), and lines said once about the level (a reused dataset, a refused flush)
    prompts_sent_as: str
    dataset_records_reused: int | None
    level_notes: list[str]
    errors: list[str]
    valid: bool
    invalid_reasons: list[str]
    harness_retries: int  # runs measured again because the client's own lag spoiled them
    output_throughput_per_user: float | None  # 1000 / median TPOT: the tok/s one request sees
    gpus: int | None  # GPUs the config runs on (space `gpus:`, else the engine's TP x DP x PP)
    output_throughput_per_gpu: float | None
    power_w_mean: float | None  # nvidia-smi power.draw over the measured runs, the server's GPUs summed
    energy_j_per_output_token: float | None
    # combine_repeats adds these when a level ran more than once
    repeats: int
    repeat_output_throughputs: list[float]
    cv_output_throughput: float
    unstable: bool
    median_repeat: int
    repeat_invalid_reasons: list[list[str]]  # each repeat's own (spoiled_by_client reads them)
