"""The command line: the only place that prints for the user and chooses exit codes."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Optional

import typer

import sweeper
from rich.table import Table

from sweeper.spec.space import Space, load_space
from sweeper.errors import UserError
from sweeper.models.cli import models_app
from sweeper.cli import results as results_commands, sim as sim_commands, sweep as sweep_commands
from sweeper.cli.common import OUTPUT, RESULTS_OPT, STORAGE_OPT, console, err, interrupts_as_keyboard, user_errors
from sweeper.cli.progress import open_new_study, with_progress
from sweeper.search.study import load_study
from sweeper.search.stored import parse_stored_space

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Find the fastest safe server configuration by measuring it.")
sim_app = typer.Typer(no_args_is_help=True, help="The embedded simulator.")
app.add_typer(sim_app, name="sim")
app.add_typer(models_app, name="models")
for command in (sweep_commands.sweep, sweep_commands.worker, sweep_commands.resume, results_commands.leaderboard,
                results_commands.report, results_commands.show, results_commands.best):
    app.command()(command)
sim_app.command("best")(sim_commands.sim_best)
app.command()(sweep_commands.demo)


def print_version(wanted: bool) -> None:
    if wanted:
        typer.echo(f"sweeper {sweeper.__version__}")
        raise typer.Exit()


@app.callback()
def options(
    version: bool = typer.Option(False, "--version", callback=print_version, is_eager=True,
                                 help="Print the version and exit."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines (tables and errors still print)."),
    log_file: Optional[Path] = typer.Option(None, "--log-file", help="Also append every progress line, "
                                            "timestamped, to this file."),
) -> None:
    """Find the fastest safe server configuration by measuring it."""
    OUTPUT.quiet, OUTPUT.log_file = quiet, log_file


def main() -> None:
    app()


@app.command()
def ablate(
    space_file: Path = typer.Argument(..., help="Search-space YAML file."),
    baseline: str = typer.Option(..., "--baseline", help="A seed name of the space, or a YAML file of parameter values."),
    repeats: int = typer.Option(2, "--repeats", min=1, help="Runs of every config, interleaved."),
    hosts: Path = typer.Option(Path("hosts.yaml"), "--hosts"),
    host: str = typer.Option("local", "--host"),
    study: Optional[str] = typer.Option(None, "--study", help="Study name (default: space name + ablation + time)."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """The baseline, then each single-lever change from it: each lever's delta with a 95% CI."""
    from sweeper.search.ablation import Measured, sampled_config, single_lever_changes, summarize_ablation
    from sweeper.results.ablation_table import format_ablation_table
    from sweeper.search.study import enqueue_runs, measured_runs, run_queue

    with user_errors():
        space = load_space(space_file)
        base = _baseline_params(space, baseline)
        changes = single_lever_changes(space, base)
        runs = [run for _ in range(repeats) for run in
                [("baseline", sampled_config(space, base))] + [(f"{lever}={value}", config) for lever, value, config in changes]]
        name = study or f"{space.name}-ablation-{datetime.now():%Y%m%d-%H%M%S}"
        handle, connected = open_new_study(space_file, space, hosts, host, name, results, storage, len(runs), "random",
                                              enqueue_seeds=False)
        handle.study.set_user_attr("reference_seed", "baseline")
        enqueue_runs(handle.study, runs, seed_label="baseline")
        with_progress(handle, connected, lambda events: run_queue(handle, connected, events))
        goal = space.goals[0]  # the Pareto mode: levers are judged on its throughput objective
        rows = summarize_ablation([Measured(label, value) for label, value in measured_runs(handle.study)],
                                  goal.direction == "maximize")
        handle.study.set_user_attr("ablation", rows)
        console.print(format_ablation_table(rows, f"ablation from {baseline} ({repeats} runs each): "
                                                  f"{goal.metric} at C={goal.level}"))
        console.print(f"study [bold]{handle.name}[/] in {handle.dir}")


def _baseline_params(space: Space, baseline: str) -> dict:
    seeds = {seed.name: seed.params for seed in space.seeds}
    if baseline in seeds:
        return dict(seeds[baseline])
    path = Path(baseline)
    if not path.is_file():
        raise UserError(f"--baseline: {baseline!r} is neither a seed of {space.name} "
                        f"({', '.join(seeds) or 'none'}) nor a file")
    import yaml

    params = yaml.safe_load(path.read_text())
    unknown = sorted(set(params or {}) - set(space.parameters)) if isinstance(params, dict) else ["<not a mapping>"]
    if unknown:
        raise UserError(f"{path}: not parameters of {space.name}: {', '.join(map(str, unknown))}")
    return params


@app.command()
def validate(
    study: str = typer.Argument(...),
    top: int = typer.Option(3, "--top", min=1, help="Finalists: the best K feasible configs."),
    repeats: int = typer.Option(3, "--repeats", min=1, help="Fresh servers per finalist, interleaved."),
    hosts: Path = typer.Option(Path("hosts.yaml"), "--hosts"),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """Re-run the top K configs on fresh servers in interleaved order; declare the winner with its CI.
    In the Pareto mode: the front's top K by throughput, both objectives with their CIs."""
    from sweeper.search.ablation import Measured, summarize_finalists
    from sweeper.search.trials import is_pareto_study
    from sweeper.results.leaderboard import leaderboard_frame
    from sweeper.results.ablation_table import format_finalists_table
    from sweeper.search.study import enqueue_runs, measured_runs, run_queue

    with user_errors():
        source = load_study(study, results, storage)
        frame = leaderboard_frame(source)
        pareto = is_pareto_study(source)
        finalists = frame[frame["on_front"] if pareto else frame["feasible"]].head(top)
        if finalists.empty:
            raise UserError(f"study {study!r} has no feasible trial to validate")
        attrs = source.user_attrs
        space = parse_stored_space(attrs)
        by_number = {t.number: t for t in source.get_trials(deepcopy=False)}
        labels = {f"trial {int(n)}": dict(by_number[int(n)].params) for n in finalists["trial"]}
        runs = [(label, params) for _ in range(repeats) for label, params in labels.items()]
        name = f"{study}-validate-{datetime.now():%Y%m%d-%H%M%S}"
        # The study's stored copy of the space, never the file (it may have changed or gone).
        handle, connected = open_new_study(Path(attrs["space_path"]), space, hosts, attrs["host_name"], name,
                                            results, storage, len(runs), "random", enqueue_seeds=False,
                                            space_text=attrs["space_text"])
        handle.study.set_user_attr("reference_text", attrs.get("reference_text"))
        handle.study.set_user_attr("reference_samples", attrs.get("reference_samples"))
        enqueue_runs(handle.study, runs)
        with_progress(handle, connected, lambda events: run_queue(handle, connected, events))
        if pareto:
            _report_pareto_finalists(source, handle.study, list(labels), repeats)
            return
        maximize = space.objective.direction == "maximize"
        rows = summarize_finalists([Measured(label, value) for label, value in measured_runs(handle.study)], maximize)
        source.set_user_attr("validation", {"study": name, "rows": rows})
        console.print(format_finalists_table(rows, f"finalists of {study}, {repeats} fresh runs each"))
        original = list(labels)
        ranked = [row["config"] for row in rows]
        winner = rows[0]
        if ranked != original:
            console.print(f"[yellow]ranking changed:[/] sweep order {original}, validated order {ranked}")
        if winner["mean"] is None:
            raise UserError("every finalist failed on re-run; see the validation study's trials")
        console.print(f"winner: {winner['config']} {space.objective.metric} = {winner['mean']:.2f} "
                      f"± {winner['ci95']:.2f} (95% CI)")


def _report_pareto_finalists(source, validation, original: list[str], repeats: int) -> None:
    """Both objectives of each re-run front member with 95% CIs, and which members the re-measured
    means keep on the front."""
    from sweeper.search.ablation import summarize_pareto_finalists
    from sweeper.results.ablation_table import format_pareto_finalists_table
    from sweeper.search.study import measured_values

    rows = summarize_pareto_finalists(measured_values(validation))
    source.set_user_attr("validation", {"study": validation.study_name, "rows": rows, "mode": "pareto"})
    names = tuple(source.metric_names or ("objective 1", "objective 2"))
    console.print(format_pareto_finalists_table(rows, names, f"Pareto front of {source.study_name}: "
                                                             f"{len(original)} members, {repeats} fresh runs each"))
    kept = [row["config"] for row in rows if row["on_front"]]
    if not kept:
        raise UserError("every finalist failed on re-run; see the validation study's trials")
    if dropped := [label for label in original if label not in kept]:
        console.print(f"[yellow]front changed:[/] {', '.join(dropped)} dominated or failed on re-run")
    console.print(f"front after re-run: {', '.join(kept)} (means; see the 95% CIs before choosing)")


@app.command()
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
) -> None:
    """Measure a running server with sweeper's client and metrics; launches nothing."""
    import json as json_module

    from sweeper.loadgen.client import StreamOptions
    from sweeper.loadgen.endpoints import APIS
    from sweeper.loadgen.ladder import LoadPlan, bench_serving_record, discover_model, run_load
    from sweeper.loadgen.vocab import local_vocab_size
    from sweeper.loadgen.workload import tokenizer_from_file

    with user_errors():
        try:
            levels = tuple(int(c) for c in concurrency.split(","))
        except ValueError:
            raise UserError(f"--concurrency: expected numbers like 1,4,16, got {concurrency!r}") from None
        if not levels or min(levels) < 1:
            raise UserError("--concurrency: levels must be >= 1")
        if api not in APIS:
            raise UserError(f"--api: one of {', '.join(APIS)}, got {api!r}")
        if not model:
            try:
                model = discover_model(url)
            except ValueError as exc:
                raise UserError(str(exc)) from None
        plan = LoadPlan(
            concurrency=levels, input_len=input_len, output_len=output_len,
            requests_per_level=requests_per_level, repeats=repeats, seed=seed,
            request_rate=request_rate or None, poisson=not fixed_rate,
            slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms, time_scale=time_scale,
            tokenizer=tokenizer_from_file(str(tokenizer)) if tokenizer else None,
            vocab_size=local_vocab_size(model),
            options=StreamOptions(api=api, timeout_s=timeout, stall_timeout_s=stall_timeout,
                                  min_tokens=min_tokens, continuous_usage=continuous_usage),
        )
        if engine is not None:
            from dataclasses import replace

            from sweeper.engines import ENGINES, get_engine
            from sweeper.loadgen.client import fit_to_dialect

            if engine not in ENGINES:
                raise UserError(f"--engine: one of {', '.join(sorted(ENGINES))}, got {engine!r}")
            plan = replace(plan, options=fit_to_dialect(plan.options, get_engine(engine).info.dialect))
        table = Table(title=f"{url}  model {model}  input {input_len}  output {output_len}")
        for name in ("C", "completed", "out tok/s", "total tok/s", "req/s", "TTFT p50/p99 ms",
                     "ITL p50/p99 ms", "TPOT p50 ms", "e2e p50 ms", "achieved C", "goodput", "valid"):
            table.add_column(name, justify="right")

        def show_level(level: int, m: dict) -> None:
            goodput = "-" if m.get("request_goodput") is None else f"{m['request_goodput']:.2f}"
            verdict = "[green]yes[/]" if m["valid"] else "[red]no[/]: " + "; ".join(m["invalid_reasons"])
            if m.get("unstable"):
                verdict += f" [yellow](unstable, CV {m['cv_output_throughput']:.1%})[/]"
            if m.get("coarse_stream"):
                verdict += f" [yellow](coarse stream, {m['tokens_per_chunk']:.1f} tokens per chunk)[/]"
            table.add_row(str(level), f"{m['completed']}/{m['completed'] + m['failed']}",
                          f"{m['output_throughput']:.1f}", f"{m['total_throughput']:.1f}",
                          f"{m['request_throughput']:.2f}",
                          f"{m['median_ttft_ms']:.1f}/{m['p99_ttft_ms']:.1f}",
                          f"{m['median_itl_ms']:.2f}/{m['p99_itl_ms']:.2f}", f"{m['median_tpot_ms']:.2f}",
                          f"{m['median_e2e_latency_ms']:.0f}", f"{m['concurrency']:.2f}", goodput, verdict)
            err.print(f"C={level}: {m['output_throughput']:.1f} output tok/s", highlight=False)

        results = run_load(url, model, plan, on_level=show_level)
        console.print(table)
        if json_path:
            records = [bench_serving_record(m) for m in results]
            json_path.write_text(json_module.dumps(records, indent=2) + "\n")
            console.print(f"wrote {json_path}")
        if not all(m["valid"] for m in results):
            raise typer.Exit(3)


@app.command()
def profile(
    study: str = typer.Argument(..., help="Study name."),
    trial: Optional[int] = typer.Option(None, "--trial", min=0, help="Profile this trial's config."),
    best_config: bool = typer.Option(False, "--best", help="Profile the study's best feasible config."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", min=1, help="Requests in flight (default: the objective's level)."),
    seconds: float = typer.Option(5.0, "--seconds", help="Seconds of load under the profiler."),
    top: int = typer.Option(15, "--top", min=1, help="Kernels listed."),
    hosts: Path = typer.Option(Path("hosts.yaml"), "--hosts", help="Hosts file: secret env values of the host."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """Relaunch a trial's config with the engine's torch profiler on, drive load, and print the top
    kernels by share of GPU time (attention, MoE/GEMM, communication, other)."""
    from sweeper.profile.command import profile_study_trial

    with user_errors():
        optuna_study = load_study(study, results, storage)
        try:
            with interrupts_as_keyboard():
                result = profile_study_trial(optuna_study, results, hosts, trial, best_config, concurrency,
                                             seconds, top, on_step=lambda m: err.print(f"[dim]{m}[/]", highlight=False))
        except KeyboardInterrupt:
            err.print("[yellow]interrupted:[/] the profiled server was stopped")
            raise typer.Exit(130) from None
        console.print(result.text, markup=False, highlight=False, end="")
        console.print(f"saved in {result.dir}: profile.json, profile.txt, traces/")
        for warning in result.record["warnings"]:
            err.print(f"[yellow]warning:[/] {warning}", highlight=False)


@app.command()
def kernels(
    traces: list[Path] = typer.Argument(..., help="Torch profiler traces (.json, .json.gz) or folders of them."),
    top: int = typer.Option(15, "--top", min=1, help="Kernels listed."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the table as JSON here."),
) -> None:
    """The kernel table of saved torch profiler traces (from `sweeper profile` or any engine)."""
    import json as json_module

    from sweeper.profile.command import summarize_trace_files

    with user_errors():
        result = summarize_trace_files(traces, top)
        console.print(result.text, markup=False, highlight=False, end="")
        if json_out:
            json_out.write_text(json_module.dumps(result.record, indent=2))
            console.print(f"wrote {json_out}")

