"""The level loop against a server already up (`sweeper load`; launches nothing): its sender from
this machine, each level shown as measured, the capacity search over such levels, and the
bench_serving-named records it writes. No CLI here: cli/load.py turns options into a plan and
shows what comes back."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from sweeper.loadgen.capacity import CapacitySlo, capacity_record, find_capacity
from sweeper.loadgen.client import LevelRun
from sweeper.loadgen.ladder import LadderHooks, LoadPlan, Send, run_ladder
from sweeper.loadgen.oneshot import get
from sweeper.loadgen.onhost import controller_runner
from sweeper.outcomes import LevelMetrics

# What `sweeper load --json` writes per level, in this order: bench_serving's names.
RECORD_KEYS = (
    "max_concurrency", "request_rate", "completed", "failed", "duration",
    "total_input_tokens", "total_output_tokens",
    "output_throughput", "input_throughput", "total_throughput", "request_throughput",
    "request_goodput",
    *(f"{stat}_{metric}_ms" for metric in ("ttft", "itl", "tpot", "e2e_latency")
      for stat in ("mean", "median", "std", "p90", "p95", "p99")),
    "concurrency", "client_lag_p99_ms", "repeats", "cv_output_throughput", "unstable",
    "tokens_per_chunk", "coarse_stream", "achieved_request_rate",
    "prompt_tokens_counted", "mean_prompt_tokens_counted", "prompt_tokens_counted_by",
    "prompts_sent_as", "dataset_records_reused", "level_notes",
    "cache_flushed", "prefix_cache_hit_rate", "prefix_cache_hit_tokens", "prefix_cache_query_tokens",
    "output_throughput_ci_low", "output_throughput_ci_high", "batches", "precision_reached", "warmup_dropped_s",
    "steady_requests", "ramp_s", "drain_s", "window_s",
    "valid", "invalid_reason",
)


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


def closed_or_open_loop(base_url: str, model: str, plan: LoadPlan) -> Send:
    """`sweeper load`'s sender: closed loop at C, or open loop at the plan's rate capped at C."""
    run = controller_runner(base_url, model)  # the trial's sender from the controller, too

    def send(prompts, concurrency: int, until=None, offsets: list[float] | None = None) -> LevelRun:
        return run(prompts, plan.output_len, concurrency, plan.options, until, offsets=offsets)

    return send


class LoadCommandHooks(LadderHooks):
    """`sweeper load`: each level names its target and rate, and is shown as it is measured."""

    def __init__(self, plan: LoadPlan, on_level: Callable[[int, LevelMetrics], None]) -> None:
        self.plan, self.on_level = plan, on_level

    def level_fields(self, concurrency: int, metrics: LevelMetrics) -> dict[str, Any]:
        return {"max_concurrent_requests": concurrency or None, "request_rate": self.plan.request_rate}

    def level_done(self, concurrency: int, metrics: LevelMetrics) -> None:
        self.on_level(concurrency, metrics)


def measure_level(base_url: str, model: str, plan: LoadPlan, concurrency: int) -> LevelMetrics:
    """One level of `sweeper load`: warmup, then `repeats` measured runs; the median kept. With
    the plan's request_rate, an open loop at it (concurrency: a cap, 0 for none)."""
    levels, _ = run_ladder(replace(plan, concurrency=(concurrency,)), closed_or_open_loop(base_url, model, plan),
                           LoadCommandHooks(plan, lambda c, m: None))
    return levels[concurrency]


def run_load(base_url: str, model: str, plan: LoadPlan,
             on_level: Callable[[int, LevelMetrics], None] = lambda c, m: None) -> list[LevelMetrics]:
    """`sweeper load`'s ladder against a server already up: each level's metrics, in order."""
    levels, _ = run_ladder(plan, closed_or_open_loop(base_url, model, plan), LoadCommandHooks(plan, on_level))
    return list(levels.values())


def run_capacity_search(base_url: str, model: str, plan: LoadPlan, slo: CapacitySlo, *, rate: bool,
                        ceiling: float, resolution: float, cap: int = 0,
                        on_level: Callable[[float, LevelMetrics], None] = lambda load, m: None) -> dict:
    """`sweeper load --find-capacity`: the capacity search (loadgen/capacity.py) with each load a
    level of this ladder: a closed loop at C, or (rate) an open loop at the plan's arrival law,
    capped at `cap` in flight (0: none). The search's JSON record."""
    def measure(load: float) -> LevelMetrics:
        if rate:
            metrics = measure_level(base_url, model, replace(plan, request_rate=float(load)), cap)
        else:
            metrics = measure_level(base_url, model, replace(plan, request_rate=None), int(load))
        on_level(load, metrics)
        return metrics

    start = plan.request_rate if rate else 1
    found = find_capacity(measure, slo, start=start, ceiling=ceiling, resolution=resolution, relative=rate,
                          integer=not rate)
    return capacity_record(found, "rate" if rate else "concurrency", slo, bench_serving_record)


def write_load_records(path: Path, levels: list[LevelMetrics]) -> None:
    """`sweeper load --json`: one bench_serving-named object per level."""
    path.write_text(json.dumps([bench_serving_record(m) for m in levels], indent=2) + "\n")


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
