"""The command line: the only place that prints for the user and chooses exit codes."""

from __future__ import annotations

import signal
import sys
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Iterator, List, Optional

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from sweeper.spec.space import Space, load_space
from sweeper.spec.hosts import load_host
from sweeper.errors import UserError
from sweeper.hosts import Host, open_host
from sweeper.models.cli import models_app
from sweeper.search.samplers import SAMPLERS
from sweeper.search.trials import best_trial
from sweeper.results.show import format_show
from sweeper.results.table import format_leaderboard_table
from sweeper.search.resume import check_space_unchanged
from sweeper.search.study import StudyHandle, controller_alive, create_study, host_spec_for_resume, load_study, recover_interrupted, run_sweep
from sweeper.search.stored import parse_stored_space

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Find the fastest safe server configuration by measuring it.")
sim_app = typer.Typer(no_args_is_help=True, help="The embedded simulator.")
app.add_typer(sim_app, name="sim")
app.add_typer(models_app, name="models")
# Piped output gets a wide page rather than rich's 80 columns, so tables stay readable in logs.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)

RESULTS_OPT = typer.Option(Path("results"), "--results", help="Folder holding one folder per study.")
STORAGE_OPT = typer.Option(None, "--storage", help="Any Optuna storage URL (default: SQLite in the study folder).")


def parse_duration(text: str) -> float:
    """'6h', '90m', '45s' or plain seconds -> seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    try:
        if text[-1:] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        raise UserError(f"--time-budget: expected a duration like 6h, 90m or 45s, got {text!r}") from None


def main() -> None:
    app()


@contextmanager
def user_errors() -> Iterator[None]:
    """A UserError becomes one red line and an exit code; anything else keeps its traceback."""
    try:
        yield
    except UserError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None


@contextmanager
def interrupts_as_keyboard() -> Iterator[None]:
    """SIGTERM and SIGHUP stop a sweep the way Ctrl-C does: the server is stopped, the trial kept."""
    def raise_interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, raise_interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


class RichEvents:
    """Progress while sweeping: trial n of N, stage, elapsed, best so far."""

    def __init__(self, live: Live):
        self.live, self.number, self.evaluation, self.budget = live, None, 0, 0
        self.stage_name, self.started, self.best = "", time.monotonic(), None

    def render(self) -> str:
        elapsed = time.monotonic() - self.started
        best = "-" if self.best is None else f"{self.best:.2f}"
        return (f"[bold]trial {self.number}[/] (evaluation {self.evaluation} of {self.budget})  "
                f"stage [cyan]{self.stage_name}[/]  elapsed {elapsed:5.0f}s  best {best}")

    def trial_started(self, number, evaluation, budget, config):
        self.number, self.evaluation, self.budget = number, evaluation, budget
        settings = " ".join(f"{k}={v}" for k, v in config.items())
        self.live.console.print(f"trial {number}: {settings}", highlight=False)
        self.live.update(self.render())

    def stage(self, number, stage):
        self.stage_name = stage
        self.live.update(self.render())

    def trial_finished(self, number, summary, best):
        self.best = best
        self.live.console.print(f"  -> trial {number}: {summary}", highlight=False)
        self.live.update(self.render())


def _with_progress(handle: StudyHandle, host: Host, run) -> None:
    """Run trials with the live progress line; Ctrl-C stops the server and says how to resume."""
    try:
        with interrupts_as_keyboard(), Live("starting", console=console, refresh_per_second=4,
                                             transient=True) as live:
            run(RichEvents(live))
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted:[/] the running server was stopped and the trial recorded. "
                  f"Continue with: sweeper resume {handle.name} --results {handle.results_dir}")
        raise typer.Exit(130) from None
    finally:
        host.close()


def _sweep(handle: StudyHandle, host: Host, top: int, seed: int | None = None,
           time_budget_s: float | None = None) -> None:
    _with_progress(handle, host, lambda events: run_sweep(handle, host, events, seed, time_budget_s))
    console.print(format_leaderboard_table(handle.study, top))
    console.print(f"study [bold]{handle.name}[/] in {handle.dir}")


def _open_new_study(space_file: Path, space: Space, hosts: Path, host: str, name: str, results: Path,
                    storage: str | None, budget: int, sampler: str | None,
                    enqueue_seeds: bool = True, space_text: str | None = None) -> tuple[StudyHandle, Host]:
    host_spec = load_host(hosts, host)
    connected = open_host(host, host_spec)  # before the study exists: an unreachable host leaves nothing
    try:
        return create_study(name, space, space_file, host, host_spec, results, storage, budget, sampler,
                            enqueue_seeds, space_text), connected
    except BaseException:
        connected.close()
        raise


@app.command()
def sweep(
    space_file: Path = typer.Argument(..., help="Search-space YAML file."),
    hosts: Path = typer.Option(Path("hosts.yaml"), "--hosts", help="Hosts file."),
    host: Optional[List[str]] = typer.Option(None, "--host", help="Host name in the hosts file (default local); "
                                             "repeat it to run one worker per host on one PostgreSQL study."),
    study: Optional[str] = typer.Option(None, "--study", help="Study name (default: space name + time)."),
    trials: Optional[int] = typer.Option(None, "--trials", min=1, help="Budget of real evaluations."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
    top: int = typer.Option(10, "--top", help="Rows of the leaderboard printed at the end."),
    sampler: Optional[str] = typer.Option(None, "--sampler", help=f"{'|'.join(SAMPLERS)} (default: the space's search.sampler, auto)."),
    time_budget: Optional[str] = typer.Option(None, "--time-budget", help="Stop starting trials after this long, e.g. 6h, 90m."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Sampler seed, for a reproducible search."),
    heartbeat: float = typer.Option(30.0, "--heartbeat", min=0.5, help="PostgreSQL studies: seconds between worker heartbeats."),
    grace: float = typer.Option(600.0, "--grace", min=1.0, help="PostgreSQL studies: a worker silent this long is dead; "
                                "its trial is retried and its host lease expires."),
) -> None:
    """Create a study and run it to its budget."""
    with user_errors():
        space = load_space(space_file)
        name = study or f"{space.name}-{datetime.now():%Y%m%d-%H%M%S}"
        if sampler is not None and sampler not in SAMPLERS:
            raise UserError(f"--sampler: expected one of {', '.join(SAMPLERS)}, got {sampler!r}")
        seconds = parse_duration(time_budget) if time_budget else None
        host_names = host or ["local"]
        if len(host_names) > 1 or (storage or "").startswith("postgresql"):
            _sweep_many(space_file, space, hosts, host_names, name, results, storage, trials or space.budget.trials,
                        sampler, seed, time_budget, heartbeat, grace, top)
            return
        host = host_names[0]
        handle, connected = _open_new_study(space_file, space, hosts, host, name, results, storage,
                                            trials or space.budget.trials, sampler)
        _sweep(handle, connected, top, seed, seconds)


def _sweep_many(space_file: Path, space: Space, hosts: Path, host_names: list[str], name: str, results: Path,
                storage: str | None, budget: int, sampler: str | None, seed: int | None, time_budget: str | None,
                heartbeat: float, grace: float, top: int) -> None:
    """One `sweeper worker` process per host (per GPU set), all on one PostgreSQL study."""
    from sweeper.spec.hosts import load_hosts
    from sweeper.fleet.workers import check_shared_storage, run_worker_processes, worker_argv

    check_shared_storage(storage or "")
    known = load_hosts(hosts).hosts
    for host_name in host_names:
        load_host(hosts, host_name)  # an unknown host is an error before the study exists
    if len(set(host_names)) != len(host_names):
        raise UserError(f"--host: each host once (got {', '.join(host_names)}); GPU sets give one host several workers")
    first = host_names[0]
    handle = create_study(name, space, space_file, first, known[first], results, storage, budget, sampler)
    for key, value in {"hosts": host_names, "heartbeat_s": heartbeat, "grace_s": grace}.items():
        handle.study.set_user_attr(key, value)
    argvs = [worker_argv(name, str(hosts.resolve()), h, str(results.resolve()), gpu_set, seed, time_budget)
             for h in host_names for gpu_set in (known[h].gpu_sets or [None])]
    console.print(f"study [bold]{name}[/]: {len(argvs)} workers on {', '.join(host_names)}")
    codes = run_worker_processes(argvs, storage)
    if 130 in codes:
        err.print(f"[yellow]interrupted:[/] each worker stopped its server and recorded its trial. "
                  f"Continue with: sweeper worker {name} --host HOST --storage ... (README \"Many hosts\")")
        raise typer.Exit(130)
    console.print(format_leaderboard_table(load_study(name, results, storage), top))
    if any(codes):
        raise UserError(f"{sum(1 for c in codes if c)} of {len(codes)} workers failed (exit codes {codes})")


class WorkerEvents:
    """A worker's progress as plain lines, each prefixed with its host slot (several workers share
    one terminal, so no live line)."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def trial_started(self, number, evaluation, budget, config):
        settings = " ".join(f"{k}={v}" for k, v in config.items())
        console.print(f"[{self.prefix}] trial {number} (evaluation {evaluation} of {budget}): {settings}",
                      highlight=False, markup=False)

    def stage(self, number, stage):
        pass

    def trial_finished(self, number, summary, best):
        console.print(f"[{self.prefix}]   -> trial {number}: {summary}", highlight=False, markup=False)


@app.command()
def worker(
    study: str = typer.Argument(..., help="Name of a study in the PostgreSQL storage."),
    storage: str = typer.Option(..., "--storage", envvar="SWEEPER_STORAGE",
                                help="postgresql+psycopg://USER:PASSWORD@HOST:5432/DB (or $SWEEPER_STORAGE)."),
    host: str = typer.Option(..., "--host", help="Host name in the hosts file: the machine this worker drives."),
    hosts: Path = typer.Option(Path("hosts.yaml"), "--hosts", help="Hosts file."),
    gpu_set: Optional[str] = typer.Option(None, "--gpu-set", help="One of the host's gpu_sets (default: one worker per set)."),
    results: Path = RESULTS_OPT,
    seed: Optional[int] = typer.Option(None, "--seed", help="Sampler seed."),
    time_budget: Optional[str] = typer.Option(None, "--time-budget", help="Stop starting trials after this long."),
) -> None:
    """Join a study from this machine: run its trials on HOST until the study's budget is spent."""
    from sweeper.fleet.leases import LeaseBook, new_holder_id, slot_name
    from sweeper.search.study import open_storage
    from sweeper.fleet.workers import WorkerOptions, check_shared_storage, retry_stale_trial, run_worker, run_worker_processes, recover_shared, worker_argv

    with user_errors():
        check_shared_storage(storage)
        attrs = load_study(study, results, storage).user_attrs
        host_spec = load_host(hosts, host)
        if gpu_set is None and host_spec.gpu_sets:
            argvs = [worker_argv(study, str(hosts.resolve()), host, str(results.resolve()), s, seed, time_budget)
                     for s in host_spec.gpu_sets]
            codes = run_worker_processes(argvs, storage)
            raise typer.Exit(130 if 130 in codes else max(codes, default=0))
        if gpu_set is not None and gpu_set not in host_spec.gpu_sets:
            raise UserError(f"--gpu-set {gpu_set!r}: not one of host {host!r}'s gpu_sets ({host_spec.gpu_sets or 'none'})")
        options = WorkerOptions(heartbeat_s=float(attrs.get("heartbeat_s", 30)), grace_s=float(attrs.get("grace_s", 600)))
        rdb = open_storage(storage, options.heartbeat_s, options.grace_s, retry_stale_trial)
        import optuna

        optuna.logging.set_verbosity(optuna.logging.ERROR)  # no tracebacks for interrupted or retried trials
        optuna_study = optuna.load_study(study_name=study, storage=rdb)
        space = parse_stored_space(attrs)
        handle = StudyHandle(optuna_study, space, host, host_spec, results)
        book = LeaseBook(storage, options.grace_s)
        prefix = slot_name(host, gpu_set)
        connected = open_host(host, host_spec)
        try:
            for note in recover_shared(optuna_study, book, connected, host, space.launch.stop_grace_s):
                console.print(f"[{prefix}] recovery: {note}", highlight=False, markup=False)
            with interrupts_as_keyboard():
                ran = run_worker(handle, connected, book, new_holder_id(), gpu_set, options, WorkerEvents(prefix),
                                 seed, parse_duration(time_budget) if time_budget else None,
                                 notify=lambda note: console.print(f"[{prefix}] recovery: {note}",
                                                                   highlight=False, markup=False))
            console.print(f"[{prefix}] done: {ran} trials run here", highlight=False, markup=False)
        except KeyboardInterrupt:
            err.print(f"[{prefix}] interrupted: the server was stopped and the trial recorded", highlight=False,
                      markup=False)
            raise typer.Exit(130) from None
        finally:
            connected.close()
            book.close()


@app.command()
def resume(
    study: str = typer.Argument(..., help="Study name."),
    trials: Optional[int] = typer.Option(None, "--trials", min=1, help="New budget of real evaluations."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
    top: int = typer.Option(10, "--top"),
    time_budget: Optional[str] = typer.Option(None, "--time-budget", help="Stop starting trials after this long, e.g. 6h."),
    hosts: Path = typer.Option(Path("hosts.yaml"), "--hosts", help="Hosts file: secret env values of the host."),
) -> None:
    """Continue an interrupted study to its budget."""
    with user_errors():
        optuna_study = load_study(study, results, storage)
        attrs = optuna_study.user_attrs
        if "hosts" in attrs:  # a shared study: workers, leases and claims, not one controller
            raise UserError(f"study {study!r} runs on several hosts: continue it with "
                            f"`sweeper worker {study} --host HOST --storage ...` for each of {', '.join(attrs['hosts'])}")
        space = check_space_unchanged(attrs)
        if controller_alive(attrs.get("controller")):
            raise UserError(f"study {study!r} is being run by pid {attrs['controller']['pid']}; "
                            "stop it first")
        if trials:
            optuna_study.set_user_attr("budget", trials)
        host_spec = host_spec_for_resume(attrs, hosts)
        handle = StudyHandle(optuna_study, space, attrs["host_name"], host_spec, results)
        host = open_host(handle.host_name, host_spec)
        try:
            for note in recover_interrupted(optuna_study, host, space.launch.stop_grace_s):
                console.print(f"[yellow]recovery:[/] {note}")
        except BaseException:
            host.close()
            raise
        _sweep(handle, host, top, None, parse_duration(time_budget) if time_budget else None)


@app.command()
def leaderboard(
    study: str = typer.Argument(...),
    top: Optional[int] = typer.Option(None, "--top", min=1, help="Rows shown (default 10) and, when given, rows exported."),
    level: Optional[int] = typer.Option(None, "--level", help="Rank by the objective's metric at this concurrency level."),
    feasible_only: bool = typer.Option(False, "--feasible-only", help="Only trials that rank."),
    csv: Optional[Path] = typer.Option(None, "--csv", help="Write the rows, one per trial, to this CSV."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="... to this JSON file (a list of records)."),
    parquet: Optional[Path] = typer.Option(None, "--parquet", help="... to this Parquet file."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """The trials ranked by the objective; failures, duplicates and invalid levels never rank."""
    from sweeper.results.export import build_export_frame, write_export

    with user_errors():
        optuna_study = load_study(study, results, storage)
        console.print(format_leaderboard_table(optuna_study, top or 10, level, feasible_only))
        exports = [(path, fmt) for path, fmt in ((csv, "csv"), (json_out, "json"), (parquet, "parquet")) if path]
        if exports:
            frame = build_export_frame(optuna_study, level, feasible_only, top)
            for path, fmt in exports:
                console.print(f"wrote {write_export(frame, path, fmt)}")


@app.command()
def report(
    study: str = typer.Argument(...),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for report.html and report.md (default: the study's folder)."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """One self-contained HTML report (and its Markdown twin), rebuilt from storage."""
    from sweeper.results.report import build_report, write_report

    with user_errors():
        optuna_study = load_study(study, results, storage)
        written = write_report(build_report(optuna_study), out or results / study)
        console.print(f"wrote {written[0]} and {written[1]}")


@app.command()
def show(
    study: str = typer.Argument(...),
    watch: bool = typer.Option(False, "--watch", help="Refresh from storage until Ctrl-C."),
    interval: float = typer.Option(2.0, "--interval", min=0.2, help="Seconds between refreshes."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """Trials by state, the best so far, and what is running."""
    with user_errors():
        optuna_study = load_study(study, results, storage)
        if not watch:
            console.print(format_show(optuna_study))
            return
        # Re-read from storage on every refresh: works from another terminal or machine.
        try:
            with Live(format_show(optuna_study), console=console, refresh_per_second=1) as live:
                while True:
                    time.sleep(interval)
                    live.update(format_show(load_study(study, results, storage)))
        except KeyboardInterrupt:
            pass


@app.command()
def best(
    study: str = typer.Argument(...),
    script: bool = typer.Option(False, "--script", help="Print a ready-to-run launch script."),
    trial_number: Optional[int] = typer.Option(None, "--trial", help="This feasible trial instead of the best (e.g. a member of the Pareto front)."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """The best feasible config of a study (as a launch script with --script); in the Pareto mode,
    the front."""
    from sweeper.search.trials import chosen_trial, is_pareto_study
    from sweeper.spec.hosts import HostSpec
    from sweeper.results.script import best_launch_script

    with user_errors():
        optuna_study = load_study(study, results, storage)
        attrs = optuna_study.user_attrs
        space = parse_stored_space(attrs)
        host_spec = HostSpec.model_validate(attrs["host_spec"])
        chosen = chosen_trial(optuna_study, trial_number) if trial_number is not None else None
        text = best_launch_script(optuna_study, space, host_spec, chosen)
        if text is None:
            raise UserError(f"study {study!r} has no feasible trial yet")
        if script:
            typer.echo(text, nl=False)
        elif is_pareto_study(optuna_study) and chosen is None:
            console.print(format_leaderboard_table(optuna_study, len(optuna_study.trials), feasible_only=True))
        else:
            trial = chosen or best_trial(optuna_study)
            console.print(f"trial {trial.number}: {', '.join(f'{v:.2f}' for v in trial.values)}  {trial.params}")


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
        handle, connected = _open_new_study(space_file, space, hosts, host, name, results, storage, len(runs), "random",
                                              enqueue_seeds=False)
        handle.study.set_user_attr("reference_seed", "baseline")
        enqueue_runs(handle.study, runs, seed_label="baseline")
        _with_progress(handle, connected, lambda events: run_queue(handle, connected, events))
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
        handle, connected = _open_new_study(Path(attrs["space_path"]), space, hosts, attrs["host_name"], name,
                                            results, storage, len(runs), "random", enqueue_seeds=False,
                                            space_text=attrs["space_text"])
        handle.study.set_user_attr("reference_text", attrs.get("reference_text"))
        handle.study.set_user_attr("reference_samples", attrs.get("reference_samples"))
        enqueue_runs(handle.study, runs)
        _with_progress(handle, connected, lambda events: run_queue(handle, connected, events))
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


@sim_app.command("best")
def sim_best(
    space_file: Path = typer.Argument(..., help="Search-space YAML file (engine: sim)."),
    study: Optional[str] = typer.Option(None, "--study", help="Also compare this study's best with the optimum."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """The simulator's exact optimum for a space, from its performance model (with two
    objectives: its exact Pareto front)."""
    from sweeper.sim.best import best_config, modelled_objective

    with user_errors():
        space = load_space(space_file)
        if space.is_pareto:
            _print_modelled_front(space)
            return
        result = best_config(space)
        table = Table(title=f"simulator optimum of {space.name} ({result.feasible} feasible of {result.total} configs)")
        table.add_column("parameter")
        table.add_column("value")
        for name, value in result.config.items():
            table.add_row(name, str(value))
        console.print(table)
        console.print(f"modelled {space.goals[0].metric} at C={space.goals[0].level}: "
                      f"[bold]{result.value:.2f}[/]")
        if study:
            best = best_trial(load_study(study, results, storage))
            if best is None:
                raise UserError(f"study {study!r} has no feasible trial yet")
            modelled = modelled_objective(space, best.params)
            console.print(f"study {study}: best trial {best.number} measured {best.values[0]:.2f}, modelled "
                          f"{modelled:.2f} = {100 * modelled / result.value:.1f}% of the optimum")


def _print_modelled_front(space: Space) -> None:
    from sweeper.sim.best import modelled_front

    front, feasible, total = modelled_front(space)
    throughput, latency = space.goals
    ties: dict[tuple[float, float], list] = {}  # levers the model ignores give equal points
    for point in front:
        ties.setdefault((point.throughput, point.latency), []).append(point)
    table = Table(title=f"simulator's Pareto front of {space.name}: {len(ties)} points, {len(front)} of "
                        f"{feasible} feasible configs ({total} in all)")
    for column in (f"{throughput.name} (modelled)", f"{latency.name} (modelled)", "configs", "e.g."):
        table.add_column(column, justify="left" if column == "e.g." else "right", overflow="fold")
    for (tok_s, lat), points in ties.items():
        table.add_row(f"{tok_s:.2f}", f"{lat:.2f}", str(len(points)),
                      " ".join(f"{k}={v}" for k, v in points[0].config.items()))
    console.print(table)


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

