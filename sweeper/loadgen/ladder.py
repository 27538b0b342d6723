"""A load ladder against a server that is already up (`sweeper load`): warm up, measure each level
(repeats, median kept), and turn each level into a bench_serving-named record. Launches nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from sweeper.loadgen.client import LevelRun, StreamOptions, get, run_closed_loop, run_measured, run_open_loop
from sweeper.loadgen.metrics import combine_repeats, summarize_level
from sweeper.loadgen.vocab import DEFAULT_VOCAB_SIZE
from sweeper.loadgen.workload import arrival_offsets_s, build_prompt_texts, build_prompt_token_ids

# What `sweeper load --json` writes per level, in this order: bench_serving's names.
RECORD_KEYS = (
    "max_concurrency", "request_rate", "completed", "failed", "duration",
    "total_input_tokens", "total_output_tokens",
    "output_throughput", "input_throughput", "total_throughput", "request_throughput",
    "request_goodput",
    *(f"{stat}_{metric}_ms" for metric in ("ttft", "itl", "tpot", "e2e_latency")
      for stat in ("mean", "median", "std", "p90", "p95", "p99")),
    "concurrency", "client_lag_p99_ms", "repeats", "cv_output_throughput", "unstable",
    "tokens_per_chunk", "coarse_stream",
    "valid", "invalid_reason",
)


@dataclass(frozen=True)
class LoadPlan:
    concurrency: tuple[int, ...] = (1, 4, 16)
    input_len: int = 128
    output_len: int = 32
    requests_per_level: int = 0
    min_rounds: int = 2
    warmup_rounds: int = 1
    repeats: int = 1
    seed: int = 0
    request_rate: float | None = None  # open loop at this rate; the levels are then caps
    poisson: bool = True
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    time_scale: float = 1.0
    tokenizer: Any | None = None  # text prompts of exact length (workload.tokenizer_from_file)
    vocab_size: int | None = None  # token-id prompts stay below it (loadgen/vocab.py); None: 32000
    options: StreamOptions = field(default_factory=StreamOptions)

    def requests_at(self, concurrency: int) -> int:
        return max(self.requests_per_level, self.min_rounds * concurrency)


def discover_model(base_url: str, timeout_s: float = 10.0) -> str:
    """The first model id the server lists at /v1/models."""
    try:
        status, text = get(base_url.rstrip("/") + "/v1/models", timeout_s)
        if status != 200:
            raise ValueError(f"HTTP {status}")
        return str(json.loads(text)["data"][0]["id"])
    except Exception as exc:
        raise ValueError(f"cannot read a model name from {base_url}/v1/models ({type(exc).__name__}: "
                         f"{exc}); pass --model") from exc


def build_prompts(plan: LoadPlan, n: int, seed: int) -> list[list[int]] | list[str]:
    """Token ids for completions without a tokenizer; text for chat or with a tokenizer."""
    if plan.options.api == "chat" or plan.tokenizer is not None:
        return build_prompt_texts(n, plan.input_len, seed, tokenizer=plan.tokenizer)
    return build_prompt_token_ids(n, plan.input_len, seed, plan.vocab_size or DEFAULT_VOCAB_SIZE)


def run_once(base_url: str, model: str, plan: LoadPlan, concurrency: int, prompts: list) -> LevelRun:
    if plan.request_rate is None:
        return run_measured(run_closed_loop(base_url, model, prompts, plan.output_len, concurrency,
                                           options=plan.options))
    offsets = arrival_offsets_s(len(prompts), plan.request_rate, poisson=plan.poisson, seed=plan.seed)
    return run_measured(run_open_loop(base_url, model, prompts, plan.output_len, offsets,
                                     max_concurrency=concurrency, options=plan.options))


def measure_level(base_url: str, model: str, plan: LoadPlan, concurrency: int) -> dict:
    """Warmup (not measured), then `repeats` measured runs with fresh prompts; the median kept."""
    warmup = build_prompts(plan, plan.warmup_rounds * concurrency, plan.seed + 10_000 + concurrency)
    if warmup:
        run_once(base_url, model, plan, concurrency, warmup)
    summaries = []
    for repeat in range(plan.repeats):
        prompts = build_prompts(plan, plan.requests_at(concurrency),
                                plan.seed + concurrency + 100_000 * repeat)
        run = run_once(base_url, model, plan, concurrency, prompts)
        summaries.append(summarize_level(
            run.samples, concurrency if plan.request_rate is None else None, run.duration_s,
            time_scale=plan.time_scale, requested_output_len=plan.output_len, lag=run.lag,
            slo_ttft_ms=plan.slo_ttft_ms, slo_tpot_ms=plan.slo_tpot_ms))
    metrics = combine_repeats(summaries)
    metrics["max_concurrent_requests"] = concurrency
    metrics["request_rate"] = plan.request_rate
    return metrics


def run_load(base_url: str, model: str, plan: LoadPlan,
             on_level: Callable[[int, dict], None] = lambda c, m: None) -> list[dict]:
    levels = []
    for concurrency in plan.concurrency:
        metrics = measure_level(base_url, model, plan, concurrency)
        on_level(concurrency, metrics)
        levels.append(metrics)
    return levels


def bench_serving_record(metrics: dict) -> dict:
    """One level as `sweeper load --json` writes it: bench_serving's key names, `concurrency` as
    achieved, `max_concurrency` as the target, `valid` and `invalid_reason` (reasons joined)."""
    record = {key: _json_safe(metrics.get(key)) for key in RECORD_KEYS}
    record["max_concurrency"] = metrics.get("max_concurrent_requests")
    record["invalid_reason"] = "; ".join(metrics.get("invalid_reasons") or []) or None
    return record


def _json_safe(value: Any) -> Any:
    """NaN (no data, e.g. no completed request) is not JSON: None instead."""
    return None if isinstance(value, float) and value != value else value
