"""`sweeper ablate` and `validate`: chosen configs measured again on fresh servers, in interleaved
order: one lever at a time from a baseline, or the finalists of a study."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Optional

import typer

from sweeper.levels import short_level
from sweeper.cli.common import STUDY_ARG, picked_study, SPACE_ARG, RESULTS_OPT, STORAGE_OPT, console, user_errors
from sweeper.cli.progress import open_new_study, with_progress
from sweeper.errors import UserError
from sweeper.study.stored import parse_stored_space
from sweeper.spec.space import Space
from sweeper.spec.space_file import load_space
from sweeper.workflows.ablation import Measured, ablation_runs, repeats_for_noise, sampled_config, summarize_ablation, finalist_runs, summarize_pareto_finalists
from sweeper.study.confidence import MAX_REPEATS
from sweeper.study.runs import enqueue_runs, measured_runs, run_queue, measured_values
from sweeper.hosts import open_host
from sweeper.study.trials import is_pareto_study
from sweeper.spec.hosts import load_host


PILOT_RUNS = 3  # first runs of the baseline that measure the noise ablate's repeats are sized for


def ablate(
    space_file: Path = SPACE_ARG,
    baseline: str = typer.Option(..., "--baseline", help="A seed name of the space, or a YAML file of parameter values."),
    repeats: Optional[int] = typer.Option(None, "--repeats", min=1, help="Runs of every config, interleaved "
                                          "(default: enough to detect a 5% change at the noise measured on "
                                          f"{PILOT_RUNS} first runs of the baseline)."),
    hosts: Path = typer.Option(Path("hosts.yaml"), "--hosts"),
    host: str = typer.Option("local", "--host"),
    study: Optional[str] = typer.Option(None, "--study", help="Study name (default: space name + ablation + time)."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """The baseline, then each single-lever change from it: each lever's delta with a 95% CI."""
    # lazy for CLI start-up (cli/__init__.py)
    from sweeper.results.ablation_table import format_ablation_table

    with user_errors():
        space = load_space(space_file)
        params = _baseline_params(space, baseline)
        round_size = len(ablation_runs(space, params, 1))
        name = study or f"{space.name}-ablation-{datetime.now():%Y%m%d-%H%M%S}"
        budget = round_size * repeats if repeats else PILOT_RUNS + round_size * MAX_REPEATS  # the most it may run
        handle, connected = open_new_study(space_file, space, hosts, host, name, results, storage, budget, "random",
                                              enqueue_seeds=False)
        handle.study.set_user_attr("reference_seed", "baseline")
        chosen: dict = {}

        def run(events) -> None:
            n = repeats
            if n is None:  # the noise first: the baseline on fresh servers (these runs count as its own)
                enqueue_runs(handle.study, [("baseline", sampled_config(space, params))] * PILOT_RUNS,
                             seed_label="baseline")
                run_queue(handle, connected, events)
                chosen.update(repeats_for_noise([v for label, v in measured_runs(handle.study) if label == "baseline"]))
                n = chosen["repeats"]
                handle.study.set_user_attr("ablation_repeats", chosen)
                handle.study.set_user_attr("budget", PILOT_RUNS + round_size * n)
                console.print(chosen["note"])
            enqueue_runs(handle.study, ablation_runs(space, params, n), seed_label="baseline")
            run_queue(handle, connected, events)

        with_progress(handle, connected, run)
        goal = space.goals[0]  # the Pareto mode: levers are judged on its throughput objective
        rows = summarize_ablation([Measured(label, value) for label, value in measured_runs(handle.study)],
                                  goal.direction == "maximize")
        handle.study.set_user_attr("ablation", rows)
        runs_each = f"{repeats} runs each" if repeats else f"{chosen['repeats']} runs each, baseline +{PILOT_RUNS}"
        console.print(format_ablation_table(rows, f"ablation from {baseline} ({runs_each}): "
                                                  f"{goal.metric} at {short_level(goal.level)}"))
        if chosen:
            console.print(chosen["note"])
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


def validate(
    study: Optional[str] = STUDY_ARG,
    top: int = typer.Option(3, "--top", min=1, help="Finalists: the best K feasible configs."),
    repeats: int = typer.Option(3, "--repeats", min=1, help="Fresh servers per finalist, interleaved."),
    hosts: Path = typer.Option(Path("hosts.yaml"), "--hosts"),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """Re-run the top K configs on fresh servers in interleaved order; declare the winner with its CI.
    In the Pareto mode: the front's top K by throughput, both objectives with their CIs."""
    # lazy for CLI start-up (cli/__init__.py)
    from sweeper.workflows.validation import create_validation_study, record_validation
    from sweeper.results.ablation_table import format_finalists_table

    with user_errors():
        study, source = picked_study(study, results, storage)
        pareto = is_pareto_study(source)
        labels, runs = finalist_runs(source, top, repeats)
        if not labels:
            raise UserError(f"study {study!r} has no feasible trial to validate")
        attrs = source.user_attrs
        space = parse_stored_space(attrs)
        name = f"{study}-validate-{datetime.now():%Y%m%d-%H%M%S}"
        host_spec = load_host(hosts, attrs["host_name"])
        connected = open_host(attrs["host_name"], host_spec)  # before the study exists
        try:
            handle = create_validation_study(source, name, results, storage, attrs["host_name"], host_spec, len(runs))
        except BaseException:
            connected.close()
            raise
        enqueue_runs(handle.study, runs)
        with_progress(handle, connected, lambda events: run_queue(handle, connected, events))
        if pareto:
            _report_pareto_finalists(source, handle.study, labels, repeats)
            return
        maximize = space.objective.direction == "maximize"
        rows = record_validation(source, handle.study, maximize)
        console.print(format_finalists_table(rows, f"finalists of {study}, {repeats} fresh runs each"))
        original = labels
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
    # lazy for CLI start-up (cli/__init__.py)
    from sweeper.results.ablation_table import format_pareto_finalists_table

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
