"""`sweeper sweep`, `worker` and `resume`: running a study's trials."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import List, Optional

import typer

from sweeper.cli.campaign import continue_campaign
from sweeper.cli.common import STUDY_ARG, picked_study, SPACE_ARG, OUTPUT, RESULTS_OPT, STORAGE_OPT, WARM_START_OPT, console, err, interrupts_as_keyboard, parse_duration, user_errors
from sweeper.cli.progress import LineEvents, open_new_study, sweep_and_print, verbose_lines_to, warm_start_study
from sweeper.errors import UserError
from sweeper.hosts import open_host
from sweeper.results.table import format_leaderboard_table
from sweeper.study.resume import check_space_unchanged
from sweeper.search.samplers import SAMPLERS
from sweeper.study.stored import parse_stored_space
from sweeper.study.store import StudyHandle, controller_alive, create_study, host_spec_for_resume, load_study
from sweeper.study.runs import recover_interrupted
from sweeper.spec.hosts import DEFAULT_HOSTS_FILE, load_host, load_hosts
from sweeper.spaces import packaged_spaces
from sweeper.spec.space import Space
from sweeper.spec.space_file import load_space
from sweeper.study.storage import open_storage
from sweeper.cli.sim import format_demo_answer


def sweep(
    space_file: Path = SPACE_ARG,
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
    warm_start: Optional[List[str]] = WARM_START_OPT,
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
                        sampler, seed, time_budget, heartbeat, grace, top, warm_start or [])
            return
        host = host_names[0]
        handle, connected = open_new_study(space_file, space, hosts, host, name, results, storage,
                                            trials or space.budget.trials, sampler, enqueue_seeds=False)
        try:
            warm_start_study(handle, warm_start or [])
        except BaseException:
            connected.close()
            raise
        sweep_and_print(handle, connected, top, seed, seconds)


def _sweep_many(space_file: Path, space: Space, hosts: Path, host_names: list[str], name: str, results: Path,
                storage: str | None, budget: int, sampler: str | None, seed: int | None, time_budget: str | None,
                heartbeat: float, grace: float, top: int, warm_start: list[str]) -> None:
    """One `sweeper worker` process per host (per GPU set), all on one PostgreSQL study."""
    # lazy for CLI start-up (cli/__init__.py)
    from sweeper.fleet.workers import check_shared_storage, run_worker_processes, worker_argv

    check_shared_storage(storage or "")
    known = load_hosts(hosts).hosts
    for host_name in host_names:
        load_host(hosts, host_name)  # an unknown host is an error before the study exists
    if len(set(host_names)) != len(host_names):
        raise UserError(f"--host: each host once (got {', '.join(host_names)}); GPU sets give one host several workers")
    first = host_names[0]
    handle = create_study(name, space, space_file, first, known[first], results, storage, budget, sampler,
                          enqueue_seeds=False)
    warm_start_study(handle, warm_start)
    for key, value in {"hosts": host_names, "heartbeat_s": heartbeat, "grace_s": grace}.items():
        handle.study.set_user_attr(key, value)
    argvs = [worker_argv(name, str(hosts.resolve()), h, str(results.resolve()), gpu_set, seed, time_budget,
                         OUTPUT.verbose)
             for h in host_names for gpu_set in (known[h].gpu_sets or [None])]
    console.print(f"study [bold]{name}[/]: {len(argvs)} workers on {', '.join(host_names)}")
    codes = run_worker_processes(argvs, storage)
    if 130 in codes:
        err.print(f"[yellow]interrupted:[/] each worker stopped its server and recorded its trial. "
                  f"Continue with: sweeper worker {name} --host HOST --storage ... (docs/hosts.md \"Many hosts\")")
        raise typer.Exit(130)
    console.print(format_leaderboard_table(load_study(name, results, storage), top))
    if any(codes):
        raise UserError(f"{sum(1 for c in codes if c)} of {len(codes)} workers failed (exit codes {codes})")


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
    # lazy for CLI start-up (cli/__init__.py)
    from sweeper.fleet.leases import LeaseBook, new_holder_id, slot_name
    from sweeper.fleet.workers import WorkerOptions, check_shared_storage, retry_stale_trial, run_worker, run_worker_processes, recover_shared, worker_argv

    with user_errors():
        check_shared_storage(storage)
        attrs = load_study(study, results, storage).user_attrs
        host_spec = load_host(hosts, host)
        if gpu_set is None and host_spec.gpu_sets:
            argvs = [worker_argv(study, str(hosts.resolve()), host, str(results.resolve()), s, seed, time_budget,
                                 OUTPUT.verbose)
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
                events = LineEvents(prefix)
                with verbose_lines_to(events):
                    ran = run_worker(handle, connected, book, new_holder_id(), gpu_set, options, events,
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


def resume(
    study: Optional[str] = STUDY_ARG,
    trials: Optional[int] = typer.Option(None, "--trials", min=1, help="New budget of real evaluations."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
    top: int = typer.Option(10, "--top"),
    time_budget: Optional[str] = typer.Option(None, "--time-budget", help="Stop starting trials after this long, e.g. 6h."),
    hosts: Path = typer.Option(Path("hosts.yaml"), "--hosts", help="Hosts file: secret env values of the host."),
) -> None:
    """Continue an interrupted study to its budget."""
    with user_errors():
        study, optuna_study = picked_study(study, results, storage)
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
        if attrs.get("campaign_phase"):  # a campaign continues at its phase (cli/campaign.py)
            host.close()
            continue_campaign(handle, hosts, storage)
            return
        sweep_and_print(handle, host, top, None, parse_duration(time_budget) if time_budget else None)


def demo(
    trials: Optional[int] = typer.Option(None, "--trials", min=1, help="Budget of real evaluations (default: the space's)."),
    results: Path = RESULTS_OPT,
    top: int = typer.Option(10, "--top", help="Rows of the leaderboard printed at the end."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Sampler seed, for a reproducible search."),
) -> None:
    """A real sweep of the embedded simulator from any folder: the packaged demo space on this
    machine (the hosts file's `local` host, or the built-in one when there is none)."""
    # lazy for CLI start-up (cli/__init__.py)
    from sweeper.sim.best import best_config

    with user_errors():
        space_file = packaged_spaces()["demo"]
        space = load_space(space_file)
        name = f"{space.name}-{datetime.now():%Y%m%d-%H%M%S}"
        handle, connected = open_new_study(space_file, space, DEFAULT_HOSTS_FILE, "local", name, results, None,
                                           trials or space.budget.trials, None)
        sweep_and_print(handle, connected, top, seed)
        for line in format_demo_answer(space, handle.study, best_config(space)):
            console.print(line, highlight=False, markup=False)
