"""Engine-native benchmark results read into sweeper's level record (pure parsers).

- SGLang `python -m sglang.bench_serving --output-file F` APPENDS one JSON object per run (one
  line each): parse_bench_serving_lines.
- `vllm bench serve --save-result` writes one JSON object per run: parse_vllm_result.

Both come back with summarize_level's key names where the engine has the number, so a row from
either lies beside one of ours. Differences handled here (engines.md):
- vLLM writes `total_token_throughput` (SGLang, and we: `total_throughput`) and no
  `input_throughput` (computed from total_input_tokens / duration).
- vLLM's `max_concurrent_requests` is the PEAK number in flight it observed, SGLang's and ours the
  target; the target is `max_concurrency` in both files (None: no cap, an open-loop run).
- vLLM has no achieved `concurrency` and no e2e percentiles unless asked (--percentile-metrics
  with e2el); when the file keeps per-request `ttfts` and `itls`, the achieved concurrency is
  rebuilt as sum(ttft + sum(itl)) / duration.
- vLLM's percentiles are only those asked for (--metric-percentiles, default 99), so p90/p95 may
  be absent; absent statistics are left out, never invented.
- vLLM leaves ignore_eos off by default: output lengths may be short of what was asked, and only
  the engine's own usage counts are in the file.
A run is `valid` here only when nothing failed; the checks needing raw chunks (usage against the
stream, client lag) cannot be made from these files and are listed in `unchecked`.
"""

from __future__ import annotations

import json
import math
from typing import Any

from sweeper.loadgen.metrics import STAT_NAMES

METRICS = ("ttft", "itl", "tpot", "e2e_latency")
_COMMON = (
    "duration", "completed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "input_throughput", "output_throughput", "total_throughput",
    "request_goodput", "max_output_tokens_per_s",
)
UNCHECKED = ["usage vs streamed tokens", "client event-loop lag"]


def parse_bench_serving_lines(text: str) -> list[dict]:
    """Every run in an SGLang bench_serving --output-file (one JSON object per non-blank line)."""
    return [parse_bench_serving(json.loads(line)) for line in text.splitlines() if line.strip()]


def parse_bench_serving(raw: dict[str, Any]) -> dict:
    """One SGLang bench_serving result object as a sweeper level record."""
    record = _common(raw, source="sglang.bench_serving")
    record["total_throughput"] = _number(raw.get("total_throughput"))
    record["concurrency"] = _number(raw.get("concurrency"))
    return _with_validity(record, raw)


def parse_vllm_result(raw: dict[str, Any] | str) -> dict:
    """One `vllm bench serve --save-result` JSON object (or its text) as a sweeper level record."""
    if isinstance(raw, str):
        raw = json.loads(raw)
    record = _common(raw, source="vllm bench serve")
    record["total_throughput"] = _number(raw.get("total_token_throughput"))
    if record["input_throughput"] is None and record["total_input_tokens"] is not None:
        record["input_throughput"] = _ratio(record["total_input_tokens"], record["duration"])
    record["peak_concurrent_requests"] = _number(raw.get("max_concurrent_requests"))
    record["concurrency"] = _concurrency_from_requests(raw, record["duration"])
    for stat in STAT_NAMES:  # vLLM calls the e2e latency e2el
        if (value := raw.get(f"{stat}_e2el_ms")) is not None:
            record[f"{stat}_e2e_latency_ms"] = _number(value)
    return _with_validity(record, raw)


def _common(raw: dict[str, Any], source: str) -> dict:
    record: dict[str, Any] = {"source": source}
    for key in _COMMON:
        record[key] = _number(raw.get(key))
    for metric in METRICS:
        for stat in STAT_NAMES:
            key = f"{stat}_{metric}_ms"
            if key in raw:
                record[key] = _number(raw[key])
    record["max_concurrency"] = raw.get("max_concurrency")
    record["request_rate"] = _number(raw.get("request_rate"))
    record["failed"] = int(raw["failed"]) if "failed" in raw else _failed_from_errors(raw)
    return record


def _with_validity(record: dict, raw: dict) -> dict:
    reasons = []
    if record["failed"]:
        first = next((e for e in raw.get("errors") or [] if e), "")
        reasons.append(f"{record['failed']} requests failed" + (f": {first[:200]}" if first else ""))
    if not record["completed"]:
        reasons.append("no request completed")
    record["valid"] = not reasons
    record["invalid_reasons"] = reasons
    record["unchecked"] = list(UNCHECKED)
    return record


def _concurrency_from_requests(raw: dict, duration: float | None) -> float | None:
    ttfts, itls = raw.get("ttfts"), raw.get("itls")
    if not ttfts or not isinstance(itls, list) or len(itls) != len(ttfts) or not duration:
        return None
    latencies = [t + sum(gaps) for t, gaps in zip(ttfts, itls) if t and t > 0]
    return sum(latencies) / duration


def _failed_from_errors(raw: dict) -> int:
    return sum(1 for error in raw.get("errors") or [] if error)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _ratio(count: float, duration: float | None) -> float | None:
    return count / duration if duration and duration > 0 and math.isfinite(duration) else None
