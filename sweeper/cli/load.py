"""`sweeper load URL`: measure a server that is already up with the sweep's client and metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from sweeper.cli.common import console, err, user_errors
from sweeper.errors import UserError
from sweeper.loadgen.client import StreamOptions, fit_to_dialect
from sweeper.spec.datasets import FORMATS
from sweeper.loadgen.capacity import CapacitySlo
from sweeper.loadgen.endpoints import APIS, Api
from sweeper.loadgen.ladder import LoadPlan, load_records
from sweeper.loadgen.probe import LevelProbe
from sweeper.loadgen.standalone import (bench_serving_record, discover_model, run_capacity_search, run_load,
                                        write_load_records)
from sweeper.loadgen.vocab import local_vocab_size
from sweeper.loadgen.workload import tokenizer_from_file
from sweeper.engines import ENGINES, get_engine


def load(
    url: str = typer.Argument(..., help="Base URL of a server already up, e.g. http://127.0.0.1:30000."),
    concurrency: str = typer.Option("1,4,16", "--concurrency", help="Levels: requests in flight (caps with --request-rate)."),
    input_len: int = typer.Option(128, "--input-len", min=1),
    output_len: int = typer.Option(32, "--output-len", min=2),
    requests_per_level: int = typer.Option(0, "--requests-per-level", min=0,
                                           help="At least this many requests per level (and at least 2 rounds of C)."),
    min_rounds: int = typer.Option(2, "--min-rounds", min=1,
                                   help="And at least this many rounds of C requests per level (more: a shorter "
                                        "drain at the end, so a queueing server's level stays valid)."),
    model: Optional[str] = typer.Option(None, "--model", help="Model name (default: the first of /v1/models)."),
    as_json: bool = typer.Option(False, "--json", help="Print one object per level (bench_serving key names) to "
                                 "stdout instead of the table."),
    json_path: Optional[Path] = typer.Option(None, "--json-file", help="Write one object per level (bench_serving "
                                             "key names) to this file."),
    api: str = typer.Option("completions", "--api", help="completions (token-id prompts), chat (text prompts) or generate (SGLang's native /generate)."),
    engine: Optional[str] = typer.Option(None, "--engine", help="Send what this engine's server accepts (its endpoint and fields; replaces --api), e.g. transformers."),
    repeats: int = typer.Option(1, "--repeats", min=1, help="Measured runs per level; the median is kept."),
    request_rate: Optional[float] = typer.Option(None, "--request-rate", "--rate", min=0.0,
                                                 help="Open loop at this many requests/s (Poisson unless --fixed-rate); "
                                                      "with --find-capacity, search the rate from here."),
    fixed_rate: bool = typer.Option(False, "--fixed-rate", help="Evenly spaced sends instead of Poisson."),
    slo_ttft_ms: Optional[float] = typer.Option(None, "--slo-ttft-ms", help="TTFT SLO for goodput."),
    slo_tpot_ms: Optional[float] = typer.Option(None, "--slo-tpot-ms", help="TPOT SLO for goodput."),
    tokenizer: Optional[Path] = typer.Option(None, "--tokenizer", help="tokenizer.json (or its folder): exact-length text prompts."),
    continuous_usage: bool = typer.Option(True, "--continuous-usage/--no-continuous-usage",
                                          help="Ask for usage in every chunk (exact counts when chunks merge)."),
    min_tokens: bool = typer.Option(False, "--min-tokens", help="Also send min_tokens = output length."),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds per request."),
    stall_timeout: Optional[float] = typer.Option(None, "--stall-timeout", help="No byte for this long: the request stalled."),
    time_scale: float = typer.Option(1.0, "--time-scale", help="The simulator's wall/modelled clock ratio."),
    seed: int = typer.Option(0, "--seed"),
    max_client_lag_ms: float = typer.Option(5.0, "--max-client-lag-ms", min=0.0,
                                            help="Client event-loop p99 lag above this: the level is invalid "
                                                 "(raise it on a shared, busy machine)."),
    find_capacity: bool = typer.Option(False, "--find-capacity", help="Search the highest concurrency (or rate, "
                                       "with --rate) within the --slo-p99-* SLO: doubling, then bisection."),
    slo_p99_ttft_ms: Optional[float] = typer.Option(None, "--slo-p99-ttft-ms", min=0.0, help="Capacity SLO: p99 TTFT."),
    slo_p99_tpot_ms: Optional[float] = typer.Option(None, "--slo-p99-tpot-ms", min=0.0, help="Capacity SLO: p99 TPOT."),
    max_concurrency: Optional[int] = typer.Option(None, "--max-concurrency", min=1,
                                                  help="Capacity search: the ceiling (default 256); with --rate, "
                                                       "the cap on requests in flight (default none)."),
    max_rate: float = typer.Option(1000.0, "--max-rate", min=0.0, help="Rate capacity search: the ceiling."),
    resolution: Optional[float] = typer.Option(None, "--resolution", min=0.0,
                                               help="Capacity search: stop within this (concurrency: 1; rate: "
                                                    "this fraction of the rate, 0.05)."),
    dataset: Optional[Path] = typer.Option(None, "--dataset", help="ShareGPT JSON or JSONL prompts, sent verbatim (seeded sample)."),
    dataset_format: Optional[str] = typer.Option(None, "--dataset-format", help="sharegpt or jsonl (default: from the content)."),
    precision: Optional[float] = typer.Option(None, "--precision", min=0.0, max=1.0,
                                              help="Send each level until its 95% CI of output tok/s is within this "
                                                   "relative half-width (e.g. 0.02); no warm-up run then."),
    max_seconds: Optional[float] = typer.Option(None, "--max-seconds", min=0.0,
                                                help="With --precision: a level's cap in seconds (default 300)."),
    max_requests: Optional[int] = typer.Option(None, "--max-requests", min=1,
                                               help="With --precision: a level's cap in requests."),
) -> None:
    """Measure a running server with sweeper's client and metrics; launches nothing."""
    import json

    with user_errors():
        if precision is None and (max_seconds is not None or max_requests is not None):
            raise UserError("--max-seconds and --max-requests cap a precision-driven level: give --precision too")
        levels, api_name = parse_levels(concurrency), parse_api(api)
        if dataset_format is not None and dataset_format not in FORMATS:
            raise UserError(f"--dataset-format: one of {', '.join(FORMATS)}, got {dataset_format!r}")
        words = tokenizer_from_file(str(tokenizer)) if tokenizer else None
        records = load_records(str(dataset), dataset_format, words) if dataset else ()  # before any request
        model = model or _discovered_model(url)
        plan = LoadPlan(
            concurrency=levels, input_len=input_len, output_len=output_len,
            requests_per_level=requests_per_level, min_rounds=min_rounds, repeats=repeats, seed=seed,
            request_rate=request_rate or None, poisson=not fixed_rate,
            slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms, time_scale=time_scale,
            max_client_lag_ms=max_client_lag_ms,
            precision=precision or None, max_seconds=max_seconds, max_requests=max_requests,
            tokenizer=words, vocab_size=local_vocab_size(model), records=records,
            options=StreamOptions(api=api_name, timeout_s=timeout, stall_timeout_s=stall_timeout,
                                  min_tokens=min_tokens, continuous_usage=continuous_usage),
            probe=LevelProbe(url, model, tokenizer=words),
        )
        if engine is not None:
            plan = _fitted_to_engine(plan, engine)
        if find_capacity:
            _find_capacity(url, model, plan, slo_p99_ttft_ms, slo_p99_tpot_ms, max_concurrency, max_rate,
                           resolution, json_path, as_json)
            return
        if slo_p99_ttft_ms or slo_p99_tpot_ms:
            raise UserError("--slo-p99-ttft-ms/--slo-p99-tpot-ms are the capacity search's SLO: add "
                            "--find-capacity (--slo-ttft-ms/--slo-tpot-ms set goodput)")
        table = Table(title=f"{url}  model {model}  input {input_len}  output {output_len}")
        for name in ("C", "completed", "out tok/s", "total tok/s", "req/s", "TTFT p50/p99 ms",
                     "ITL p50/p99 ms", "TPOT p50 ms", "e2e p50 ms", "achieved C", "goodput", "valid"):
            table.add_column(name, justify="right")

        def show_level(level: int, m: dict) -> None:
            table.add_row(*_load_row(level, m))
            ci = (f" (95% CI {m['output_throughput_ci_low']:.1f}-{m['output_throughput_ci_high']:.1f}, "
                  f"{m['batches']} batches{'' if m['precision_reached'] else ', imprecise'})"
                  if "precision_reached" in m else "")
            err.print(f"C={level}: {m['output_throughput']:.1f} output tok/s{ci}", highlight=False)

        results = run_load(url, model, plan, on_level=show_level)
        if as_json:
            typer.echo(json.dumps([bench_serving_record(m) for m in results], indent=2))
        else:
            console.print(table)
        if json_path:
            write_load_records(json_path, results)
            (err if as_json else console).print(f"wrote {json_path}")
        if not all(m["valid"] for m in results):
            raise typer.Exit(3)


def _find_capacity(url: str, model: str, plan, ttft_ms: float | None, tpot_ms: float | None,
                   max_concurrency: int | None, max_rate: float, resolution: float | None,
                   json_path: Path | None, as_json: bool = False) -> None:
    """--find-capacity: the search, each level shown as measured, the answer and its record."""
    import json


    if ttft_ms is None and tpot_ms is None:
        raise UserError("--find-capacity needs an SLO: --slo-p99-ttft-ms MS and/or --slo-p99-tpot-ms MS")
    rate = plan.request_rate is not None
    if rate and max_rate < plan.request_rate:
        raise UserError(f"--max-rate ({max_rate:g}) is below the start --rate ({plan.request_rate:g})")
    slo = CapacitySlo(ttft_ms, tpot_ms)
    unit = "req/s" if rate else "concurrent"

    def show(load: float, m: dict) -> None:
        broken = slo.broken_by(m)
        verdict = "[green]holds[/]" if not broken else "[red]fails[/]: " + "; ".join(broken)
        err.print(f"{load:g} {unit}: p99 TTFT {m['p99_ttft_ms']:.1f} ms, p99 TPOT {m['p99_tpot_ms']:.2f} ms, "
                  f"{m['output_throughput']:.1f} out tok/s: {verdict}", highlight=False)

    record = run_capacity_search(url, model, plan, slo, rate=rate,
                                 ceiling=max_rate if rate else (max_concurrency or 256),
                                 resolution=resolution or (0.05 if rate else 1),
                                 cap=(max_concurrency or 0) if rate else 0, on_level=show)
    key = "capacity_rate" if rate else "capacity_concurrency"
    capped = " (the ceiling: it may be higher)" if record["capped"] else ""
    (err if as_json else console).print(f"capacity within the SLO: {record[key]:g} {unit}{capped}, after "
                                        f"{len(record['levels'])} levels", highlight=False)
    if as_json:
        typer.echo(json.dumps(record, indent=2))
    if json_path:
        json_path.write_text(json.dumps(record, indent=2) + "\n")
        (err if as_json else console).print(f"wrote {json_path}")


def _discovered_model(url: str) -> str:
    try:
        return discover_model(url)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _fitted_to_engine(plan, engine: str):
    """The plan's requests limited to what this engine's server accepts (`--engine`), and what it
    offers besides: its prefix-cache flush and metrics, its /tokenize."""
    from dataclasses import replace


    if engine not in ENGINES:
        raise UserError(f"--engine: one of {', '.join(sorted(ENGINES))}, got {engine!r}")
    info = get_engine(engine).info
    probe = replace(plan.probe, cache=info.prefix_cache, tokenize=info.tokenize) if plan.probe else None
    return replace(plan, options=fit_to_dialect(plan.options, info.dialect), probe=probe)


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
    if text not in APIS:
        raise UserError(f"--api: one of {', '.join(APIS)}, got {text!r}")
    return text  # type: ignore[return-value]


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
