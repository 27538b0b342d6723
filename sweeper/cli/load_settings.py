"""`sweeper load`'s options checked and built into settings, reading nothing: every refusal of an option
or a combination of options happens here, before a file is read or the server is asked anything."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sweeper.engines import ENGINES
from sweeper.errors import UserError
from sweeper.loadgen.capacity import CapacitySearch, CapacitySlo
from sweeper.loadgen.client import StreamOptions
from sweeper.loadgen.endpoints import APIS, Api
from sweeper.loadgen.ladder import LoadPlan
from sweeper.spec.datasets import FORMATS

DEFAULT_MAX_CONCURRENCY = 256  # the concurrency search's ceiling without --max-concurrency
DEFAULT_RATE_RESOLUTION = 0.05  # the rate search stops within this fraction of the rate
DEFAULT_CONCURRENCY_RESOLUTION = 1


@dataclass(frozen=True)
class LoadSettings:
    """What `sweeper load` does: the plan as far as the options give it (the tokenizer, the dataset's
    records, the vocabulary and the probe are read when it runs), and where the results go."""

    url: str
    model: str | None  # None: the first of the server's /v1/models
    plan: LoadPlan
    tokenizer: Path | None
    dataset: Path | None
    dataset_format: str | None
    engine: str | None  # send what this engine's server accepts (a name in ENGINES)
    capacity: CapacitySearch | None  # None: measure the plan's levels
    as_json: bool
    json_path: Path | None


def load_settings(
    *, url: str, concurrency: str, input_len: int, output_len: int, requests_per_level: int, min_rounds: int,
    model: str | None, as_json: bool, json_path: Path | None, api: str, engine: str | None, repeats: int,
    request_rate: float | None, fixed_rate: bool, slo_ttft_ms: float | None, slo_tpot_ms: float | None,
    tokenizer: Path | None, continuous_usage: bool, min_tokens: bool, timeout: float,
    stall_timeout: float | None, time_scale: float, seed: int, max_client_lag_ms: float,
    find_capacity: bool, slo_p99_ttft_ms: float | None, slo_p99_tpot_ms: float | None,
    max_concurrency: int | None, max_rate: float, resolution: float | None,
    dataset: Path | None, dataset_format: str | None,
    precision: float | None, max_seconds: float | None, max_requests: int | None,
) -> LoadSettings:
    """`sweeper load`'s options (named as its parameters) as settings; a UserError for options that
    contradict each other or name nothing known. A rate or precision of 0 means none."""
    if precision is None and (max_seconds is not None or max_requests is not None):
        raise UserError("--max-seconds and --max-requests cap a precision-driven level: give --precision too")
    levels, api_name = parse_levels(concurrency), parse_api(api)
    if dataset_format is not None and dataset_format not in FORMATS:
        raise UserError(f"--dataset-format: one of {', '.join(FORMATS)}, got {dataset_format!r}")
    if engine is not None and engine not in ENGINES:
        raise UserError(f"--engine: one of {', '.join(sorted(ENGINES))}, got {engine!r}")
    plan = LoadPlan(
        concurrency=levels, input_len=input_len, output_len=output_len,
        requests_per_level=requests_per_level, min_rounds=min_rounds, repeats=repeats, seed=seed,
        request_rate=request_rate or None, poisson=not fixed_rate,
        slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms, time_scale=time_scale,
        max_client_lag_ms=max_client_lag_ms,
        precision=precision or None, max_seconds=max_seconds, max_requests=max_requests,
        options=StreamOptions(api=api_name, timeout_s=timeout, stall_timeout_s=stall_timeout,
                              min_tokens=min_tokens, continuous_usage=continuous_usage),
    )
    if find_capacity:
        capacity = capacity_search(plan.request_rate, slo_p99_ttft_ms, slo_p99_tpot_ms, max_concurrency, max_rate,
                                   resolution)
    elif slo_p99_ttft_ms or slo_p99_tpot_ms:
        raise UserError("--slo-p99-ttft-ms/--slo-p99-tpot-ms are the capacity search's SLO: add "
                        "--find-capacity (--slo-ttft-ms/--slo-tpot-ms set goodput)")
    else:
        capacity = None
    return LoadSettings(url=url, model=model, plan=plan, tokenizer=tokenizer, dataset=dataset,
                        dataset_format=dataset_format, engine=engine, capacity=capacity, as_json=as_json,
                        json_path=json_path)


def capacity_search(start_rate: float | None, ttft_ms: float | None, tpot_ms: float | None,
                    max_concurrency: int | None, max_rate: float, resolution: float | None) -> CapacitySearch:
    """--find-capacity's search: of the rate from `start_rate` (--rate) when there is one, else of the
    concurrency; a UserError without an SLO or with a ceiling below the start."""
    if ttft_ms is None and tpot_ms is None:
        raise UserError("--find-capacity needs an SLO: --slo-p99-ttft-ms MS and/or --slo-p99-tpot-ms MS")
    if start_rate is not None and max_rate < start_rate:
        raise UserError(f"--max-rate ({max_rate:g}) is below the start --rate ({start_rate:g})")
    if start_rate is not None:
        return CapacitySearch(CapacitySlo(ttft_ms, tpot_ms), rate=True, ceiling=max_rate,
                              resolution=resolution or DEFAULT_RATE_RESOLUTION, cap=max_concurrency or 0)
    return CapacitySearch(CapacitySlo(ttft_ms, tpot_ms), rate=False,
                          ceiling=max_concurrency or DEFAULT_MAX_CONCURRENCY,
                          resolution=resolution or DEFAULT_CONCURRENCY_RESOLUTION, cap=0)


def parse_levels(text: str) -> tuple[int, ...]:
    """`--concurrency 1,4,16` as levels."""
    try:
        levels = tuple(int(c) for c in text.split(","))
    except ValueError:
        raise UserError(f"--concurrency: expected numbers like 1,4,16, got {text!r}") from None
    if not levels or min(levels) < 1:
        raise UserError("--concurrency: levels must be >= 1")
    return levels


def parse_api(text: str) -> Api:
    """`--api` as one of the APIs the client speaks."""
    if text not in APIS:
        raise UserError(f"--api: one of {', '.join(APIS)}, got {text!r}")
    return text  # type: ignore[return-value]
