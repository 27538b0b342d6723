"""`sweeper load URL`: measure a server that is already up with the sweep's client and metrics.

The command is thin: its options (declared below, one alias each) go to load_settings (cli/load_settings.py),
which checks them and reads nothing, and run_load_command reads what the plan needs and measures."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from sweeper.cli.common import console, err, user_errors
from sweeper.cli.load_settings import LoadSettings, load_settings
from sweeper.loadgen.capacity import CapacitySearch
from sweeper.engines import get_engine
from sweeper.errors import UserError
from sweeper.loadgen.client import fit_to_dialect
from sweeper.loadgen.ladder import LoadPlan, load_records
from sweeper.loadgen.probe import LevelProbe
from sweeper.loadgen.standalone import (bench_serving_record, discover_model, run_capacity_search, run_load,
                                        write_load_records)
from sweeper.loadgen.vocab import local_vocab_size
from sweeper.loadgen.workload import tokenizer_from_file

UrlArg = Annotated[str, typer.Argument(help="Base URL of a server already up, e.g. http://127.0.0.1:30000.")]
ConcurrencyOpt = Annotated[str, typer.Option(
    "--concurrency", help="Levels: requests in flight (caps with --request-rate).")]
InputLenOpt = Annotated[int, typer.Option("--input-len", min=1)]
OutputLenOpt = Annotated[int, typer.Option("--output-len", min=2)]
RequestsPerLevelOpt = Annotated[int, typer.Option(
    "--requests-per-level", min=0, help="At least this many requests per level (and at least 2 rounds of C).")]
MinRoundsOpt = Annotated[int, typer.Option(
    "--min-rounds", min=1, help="And at least this many rounds of C requests per level (more: a shorter drain at "
                                "the end, so a queueing server's level stays valid).")]
ModelOpt = Annotated[Optional[str], typer.Option("--model", help="Model name (default: the first of /v1/models).")]
JsonOpt = Annotated[bool, typer.Option(
    "--json", help="Print one object per level (bench_serving key names) to stdout instead of the table.")]
JsonFileOpt = Annotated[Optional[Path], typer.Option(
    "--json-file", help="Write one object per level (bench_serving key names) to this file.")]
ApiOpt = Annotated[str, typer.Option(
    "--api", help="completions (token-id prompts), chat (text prompts) or generate (SGLang's native /generate).")]
EngineOpt = Annotated[Optional[str], typer.Option(
    "--engine", help="Send what this engine's server accepts (its endpoint and fields; replaces --api), "
                     "e.g. transformers.")]
RepeatsOpt = Annotated[int, typer.Option("--repeats", min=1, help="Measured runs per level; the median is kept.")]
RequestRateOpt = Annotated[Optional[float], typer.Option(
    "--request-rate", "--rate", min=0.0, help="Open loop at this many requests/s (Poisson unless --fixed-rate); "
                                              "with --find-capacity, search the rate from here.")]
FixedRateOpt = Annotated[bool, typer.Option("--fixed-rate", help="Evenly spaced sends instead of Poisson.")]
SloTtftOpt = Annotated[Optional[float], typer.Option("--slo-ttft-ms", help="TTFT SLO for goodput.")]
SloTpotOpt = Annotated[Optional[float], typer.Option("--slo-tpot-ms", help="TPOT SLO for goodput.")]
TokenizerOpt = Annotated[Optional[Path], typer.Option(
    "--tokenizer", help="tokenizer.json (or its folder): exact-length text prompts.")]
ContinuousUsageOpt = Annotated[bool, typer.Option(
    "--continuous-usage/--no-continuous-usage", help="Ask for usage in every chunk (exact counts when chunks merge).")]
MinTokensOpt = Annotated[bool, typer.Option("--min-tokens", help="Also send min_tokens = output length.")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", help="Seconds per request.")]
StallTimeoutOpt = Annotated[Optional[float], typer.Option(
    "--stall-timeout", help="No byte for this long: the request stalled.")]
TimeScaleOpt = Annotated[float, typer.Option("--time-scale", help="The simulator's wall/modelled clock ratio.")]
SeedOpt = Annotated[int, typer.Option("--seed")]
MaxClientLagOpt = Annotated[float, typer.Option(
    "--max-client-lag-ms", min=0.0, help="Client event-loop p99 lag above this: the level is invalid "
                                         "(raise it on a shared, busy machine).")]
FindCapacityOpt = Annotated[bool, typer.Option(
    "--find-capacity", help="Search the highest concurrency (or rate, with --rate) within the --slo-p99-* SLO: "
                            "doubling, then bisection.")]
SloP99TtftOpt = Annotated[Optional[float], typer.Option("--slo-p99-ttft-ms", min=0.0, help="Capacity SLO: p99 TTFT.")]
SloP99TpotOpt = Annotated[Optional[float], typer.Option("--slo-p99-tpot-ms", min=0.0, help="Capacity SLO: p99 TPOT.")]
MaxConcurrencyOpt = Annotated[Optional[int], typer.Option(
    "--max-concurrency", min=1, help="Capacity search: the ceiling (default 256); with --rate, the cap on requests "
                                     "in flight (default none).")]
MaxRateOpt = Annotated[float, typer.Option("--max-rate", min=0.0, help="Rate capacity search: the ceiling.")]
ResolutionOpt = Annotated[Optional[float], typer.Option(
    "--resolution", min=0.0, help="Capacity search: stop within this (concurrency: 1; rate: this fraction of the "
                                  "rate, 0.05).")]
DatasetOpt = Annotated[Optional[Path], typer.Option(
    "--dataset", help="ShareGPT JSON or JSONL prompts, sent verbatim (seeded sample).")]
DatasetFormatOpt = Annotated[Optional[str], typer.Option(
    "--dataset-format", help="sharegpt or jsonl (default: from the content).")]
PrecisionOpt = Annotated[Optional[float], typer.Option(
    "--precision", min=0.0, max=1.0, help="Send each level until its 95% CI of output tok/s is within this relative "
                                          "half-width (e.g. 0.02); no warm-up run then.")]
MaxSecondsOpt = Annotated[Optional[float], typer.Option(
    "--max-seconds", min=0.0, help="With --precision: a level's cap in seconds (default 300).")]
MaxRequestsOpt = Annotated[Optional[int], typer.Option(
    "--max-requests", min=1, help="With --precision: a level's cap in requests.")]

LEVEL_COLUMNS = ("C", "completed", "out tok/s", "total tok/s", "req/s", "TTFT p50/p99 ms",
                 "ITL p50/p99 ms", "TPOT p50 ms", "e2e p50 ms", "achieved C", "goodput", "valid")


def load(
    url: UrlArg,
    concurrency: ConcurrencyOpt = "1,4,16",
    input_len: InputLenOpt = 128,
    output_len: OutputLenOpt = 32,
    requests_per_level: RequestsPerLevelOpt = 0,
    min_rounds: MinRoundsOpt = 2,
    model: ModelOpt = None,
    as_json: JsonOpt = False,
    json_path: JsonFileOpt = None,
    api: ApiOpt = "completions",
    engine: EngineOpt = None,
    repeats: RepeatsOpt = 1,
    request_rate: RequestRateOpt = None,
    fixed_rate: FixedRateOpt = False,
    slo_ttft_ms: SloTtftOpt = None,
    slo_tpot_ms: SloTpotOpt = None,
    tokenizer: TokenizerOpt = None,
    continuous_usage: ContinuousUsageOpt = True,
    min_tokens: MinTokensOpt = False,
    timeout: TimeoutOpt = 600.0,
    stall_timeout: StallTimeoutOpt = None,
    time_scale: TimeScaleOpt = 1.0,
    seed: SeedOpt = 0,
    max_client_lag_ms: MaxClientLagOpt = 5.0,
    find_capacity: FindCapacityOpt = False,
    slo_p99_ttft_ms: SloP99TtftOpt = None,
    slo_p99_tpot_ms: SloP99TpotOpt = None,
    max_concurrency: MaxConcurrencyOpt = None,
    max_rate: MaxRateOpt = 1000.0,
    resolution: ResolutionOpt = None,
    dataset: DatasetOpt = None,
    dataset_format: DatasetFormatOpt = None,
    precision: PrecisionOpt = None,
    max_seconds: MaxSecondsOpt = None,
    max_requests: MaxRequestsOpt = None,
) -> None:
    """Measure a running server with sweeper's client and metrics; launches nothing."""
    with user_errors():
        run_load_command(load_settings(
            url=url, concurrency=concurrency, input_len=input_len, output_len=output_len,
            requests_per_level=requests_per_level, min_rounds=min_rounds, model=model, as_json=as_json,
            json_path=json_path, api=api, engine=engine, repeats=repeats, request_rate=request_rate,
            fixed_rate=fixed_rate, slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms, tokenizer=tokenizer,
            continuous_usage=continuous_usage, min_tokens=min_tokens, timeout=timeout,
            stall_timeout=stall_timeout, time_scale=time_scale, seed=seed, max_client_lag_ms=max_client_lag_ms,
            find_capacity=find_capacity, slo_p99_ttft_ms=slo_p99_ttft_ms, slo_p99_tpot_ms=slo_p99_tpot_ms,
            max_concurrency=max_concurrency, max_rate=max_rate, resolution=resolution, dataset=dataset,
            dataset_format=dataset_format, precision=precision, max_seconds=max_seconds,
            max_requests=max_requests,
        ))


def run_load_command(settings: LoadSettings) -> None:
    """Read what the plan needs (the tokenizer and dataset first, before any request), then measure:
    the capacity search, or every level shown as measured; exit 3 when a level is invalid."""
    words = tokenizer_from_file(str(settings.tokenizer)) if settings.tokenizer else None
    records = load_records(str(settings.dataset), settings.dataset_format, words) if settings.dataset else ()
    model = settings.model or _discovered_model(settings.url)
    plan = replace(settings.plan, tokenizer=words, vocab_size=local_vocab_size(model), records=records,
                   probe=LevelProbe(settings.url, model, tokenizer=words))
    if settings.engine is not None:
        plan = _fitted_to_engine(plan, settings.engine)
    if settings.capacity is not None:
        _search_capacity(settings, settings.capacity, model, plan)
    else:
        _measure_levels(settings, model, plan)


def _measure_levels(settings: LoadSettings, model: str, plan: LoadPlan) -> None:
    """The plan's levels: each a line on stderr as it is measured, then the table (or --json)."""
    table = Table(title=f"{settings.url}  model {model}  input {plan.input_len}  output {plan.output_len}")
    for name in LEVEL_COLUMNS:
        table.add_column(name, justify="right")

    def show_level(level: int, m: dict) -> None:
        table.add_row(*_load_row(level, m))
        err.print(f"C={level}: {m['output_throughput']:.1f} output tok/s{_precision_note(m)}", highlight=False)

    results = run_load(settings.url, model, plan, on_level=show_level)
    if settings.as_json:
        typer.echo(json.dumps([bench_serving_record(m) for m in results], indent=2))
    else:
        console.print(table)
    if settings.json_path:
        write_load_records(settings.json_path, results)
        (err if settings.as_json else console).print(f"wrote {settings.json_path}")
    if not all(m["valid"] for m in results):
        raise typer.Exit(3)


def _search_capacity(settings: LoadSettings, search: CapacitySearch, model: str, plan: LoadPlan) -> None:
    """--find-capacity: the search, each level shown as measured, the answer and its record."""
    unit = "req/s" if search.rate else "concurrent"

    def show(load: float, m: dict) -> None:
        broken = search.slo.broken_by(m)
        verdict = "[green]holds[/]" if not broken else "[red]fails[/]: " + "; ".join(broken)
        err.print(f"{load:g} {unit}: p99 TTFT {m['p99_ttft_ms']:.1f} ms, p99 TPOT {m['p99_tpot_ms']:.2f} ms, "
                  f"{m['output_throughput']:.1f} out tok/s: {verdict}", highlight=False)

    record = run_capacity_search(settings.url, model, plan, search.slo, rate=search.rate, ceiling=search.ceiling,
                                 resolution=search.resolution, cap=search.cap, on_level=show)
    key = "capacity_rate" if search.rate else "capacity_concurrency"
    capped = " (the ceiling: it may be higher)" if record["capped"] else ""
    (err if settings.as_json else console).print(f"capacity within the SLO: {record[key]:g} {unit}{capped}, after "
                                                 f"{len(record['levels'])} levels", highlight=False)
    if settings.as_json:
        typer.echo(json.dumps(record, indent=2))
    if settings.json_path:
        settings.json_path.write_text(json.dumps(record, indent=2) + "\n")
        (err if settings.as_json else console).print(f"wrote {settings.json_path}")


def _discovered_model(url: str) -> str:
    try:
        return discover_model(url)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _fitted_to_engine(plan: LoadPlan, engine: str) -> LoadPlan:
    """The plan's requests limited to what this engine's server accepts (`--engine`), and what it
    offers besides: its prefix-cache flush and metrics, its /tokenize."""
    info = get_engine(engine).info
    probe = replace(plan.probe, cache=info.prefix_cache, tokenize=info.tokenize) if plan.probe else None
    return replace(plan, options=fit_to_dialect(plan.options, info.dialect), probe=probe)


def _precision_note(m: dict) -> str:
    """A precision-driven level's CI and batches, after its throughput on stderr ("" for others)."""
    if "precision_reached" not in m:
        return ""
    return (f" (95% CI {m['output_throughput_ci_low']:.1f}-{m['output_throughput_ci_high']:.1f}, "
            f"{m['batches']} batches{'' if m['precision_reached'] else ', imprecise'})")


def _load_row(level: int, m: dict) -> list[str]:
    """One level of `sweeper load`'s table."""
    goodput = "-" if m.get("request_goodput") is None else f"{m['request_goodput']:.2f}"
    verdict = "[green]yes[/]" if m["valid"] else "[red]no[/]: " + "; ".join(m["invalid_reasons"])
    if m.get("unstable"):
        verdict += f" [yellow](unstable, CV {m['cv_output_throughput']:.1%})[/]"
    if m.get("coarse_stream"):
        verdict += f" [yellow](coarse stream, {m['tokens_per_chunk']:.1f} tokens per chunk)[/]"
    return [str(level), f"{m['completed']}/{m['completed'] + m['failed']}",
            f"{m['output_throughput']:.1f}", f"{m['total_throughput']:.1f}", f"{m['request_throughput']:.2f}",
            f"{m['median_ttft_ms']:.1f}/{m['p99_ttft_ms']:.1f}",
            f"{m['median_itl_ms']:.2f}/{m['p99_itl_ms']:.2f}", f"{m['median_tpot_ms']:.2f}",
            f"{m['median_e2e_latency_ms']:.0f}", f"{m['concurrency']:.2f}", goodput, verdict]
