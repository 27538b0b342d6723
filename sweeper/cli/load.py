"""`sweeper load URL`: measure a server that is already up with the sweep's client and metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from sweeper.cli.common import console, err, user_errors
from sweeper.errors import UserError


def load(
    url: str = typer.Argument(..., help="Base URL of a server already up, e.g. http://127.0.0.1:30000."),
    concurrency: str = typer.Option("1,4,16", "--concurrency", help="Levels: requests in flight (caps with --request-rate)."),
    input_len: int = typer.Option(128, "--input-len", min=1),
    output_len: int = typer.Option(32, "--output-len", min=2),
    requests_per_level: int = typer.Option(0, "--requests-per-level", min=0,
                                           help="At least this many requests per level (and at least 2 rounds of C)."),
    model: Optional[str] = typer.Option(None, "--model", help="Model name (default: the first of /v1/models)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write one object per level (bench_serving key names)."),
    api: str = typer.Option("completions", "--api", help="completions (token-id prompts), chat (text prompts) or generate (SGLang's native /generate)."),
    engine: Optional[str] = typer.Option(None, "--engine", help="Send what this engine's server accepts (its endpoint and fields; replaces --api), e.g. transformers."),
    repeats: int = typer.Option(1, "--repeats", min=1, help="Measured runs per level; the median is kept."),
    request_rate: Optional[float] = typer.Option(None, "--request-rate", min=0.0,
                                                 help="Open loop at this many requests/s (Poisson unless --fixed-rate)."),
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
    precision: Optional[float] = typer.Option(None, "--precision", min=0.0, max=1.0,
                                              help="Send each level until its 95% CI of output tok/s is within this "
                                                   "relative half-width (e.g. 0.02); no warm-up run then."),
    max_seconds: Optional[float] = typer.Option(None, "--max-seconds", min=0.0,
                                                help="With --precision: a level's cap in seconds (default 300)."),
    max_requests: Optional[int] = typer.Option(None, "--max-requests", min=1,
                                               help="With --precision: a level's cap in requests."),
) -> None:
    """Measure a running server with sweeper's client and metrics; launches nothing."""
    from sweeper.loadgen.client import StreamOptions
    from sweeper.loadgen.ladder import LoadPlan, parse_api, parse_levels, run_load, write_load_records
    from sweeper.loadgen.vocab import local_vocab_size
    from sweeper.loadgen.workload import tokenizer_from_file

    with user_errors():
        if precision is None and (max_seconds is not None or max_requests is not None):
            raise UserError("--max-seconds and --max-requests cap a precision-driven level: give --precision too")
        levels, api_name = parse_levels(concurrency), parse_api(api)
        model = model or _discovered_model(url)
        plan = LoadPlan(
            concurrency=levels, input_len=input_len, output_len=output_len,
            requests_per_level=requests_per_level, repeats=repeats, seed=seed,
            request_rate=request_rate or None, poisson=not fixed_rate,
            slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms, time_scale=time_scale,
            precision=precision or None, max_seconds=max_seconds, max_requests=max_requests,
            tokenizer=tokenizer_from_file(str(tokenizer)) if tokenizer else None,
            vocab_size=local_vocab_size(model),
            options=StreamOptions(api=api_name, timeout_s=timeout, stall_timeout_s=stall_timeout,
                                  min_tokens=min_tokens, continuous_usage=continuous_usage),
        )
        if engine is not None:
            plan = _fitted_to_engine(plan, engine)
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
        console.print(table)
        if json_path:
            write_load_records(json_path, results)
            console.print(f"wrote {json_path}")
        if not all(m["valid"] for m in results):
            raise typer.Exit(3)


def _discovered_model(url: str) -> str:
    from sweeper.loadgen.ladder import discover_model

    try:
        return discover_model(url)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _fitted_to_engine(plan, engine: str):
    """The plan's requests limited to what this engine's server accepts (`--engine`)."""
    from dataclasses import replace

    from sweeper.engines import ENGINES, get_engine
    from sweeper.loadgen.client import fit_to_dialect

    if engine not in ENGINES:
        raise UserError(f"--engine: one of {', '.join(sorted(ENGINES))}, got {engine!r}")
    return replace(plan, options=fit_to_dialect(plan.options, get_engine(engine).info.dialect))


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
