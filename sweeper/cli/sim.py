"""`sweeper sim best`: the simulator's exact optimum (or Pareto front) of a space."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.table import Table

from sweeper.cli.common import SPACE_ARG, RESULTS_OPT, STORAGE_OPT, console, user_errors
from sweeper.errors import NothingFeasible, UserError
from sweeper.study.store import load_study
from sweeper.study.trials import best_trial
from sweeper.spec.space import Space
from sweeper.spec.space_file import load_space

if TYPE_CHECKING:  # sim.best is imported where it runs, for CLI start-up (cli/__init__.py)
    from sweeper.sim.best import SimOptimum


def sim_best(
    space_file: Path = SPACE_ARG,
    study: Optional[str] = typer.Option(None, "--study", help="Also compare this study's best with the optimum."),
    storage: Optional[str] = STORAGE_OPT,
    results: Path = RESULTS_OPT,
) -> None:
    """The simulator's exact optimum for a space, from its performance model (with two
    objectives: its exact Pareto front)."""
    # lazy for CLI start-up (cli/__init__.py)
    from sweeper.sim.best import best_config

    with user_errors():
        space = load_space(space_file)
        if space.workload.open_loop:  # the perf model answers at a concurrency, not at an arrival rate
            raise UserError(f"{space_file}: workload.request_rates: the simulator's modelled optimum is "
                            "closed loop; model the space with workload.concurrency levels")
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
            console.print(format_distance_to_optimum(space, load_study(study, results, storage), result.value),
                          highlight=False, markup=False)


def format_distance_to_optimum(space: Space, study, optimum: float) -> str:
    """The study's winner against the simulator's exact optimum (`optimum`, modelled): how close the
    search came."""
    # lazy for CLI start-up (cli/__init__.py)
    from sweeper.sim.best import modelled_objective

    best = best_trial(study)
    if best is None:
        raise UserError(f"study {study.study_name!r} has no feasible trial yet")
    modelled = modelled_objective(space, best.params)
    return (f"study {study.study_name}: best trial {best.number} measured {best.values[0]:.2f}, modelled "
            f"{modelled:.2f} = {100 * modelled / optimum:.1f}% of the optimum")


def format_demo_answer(space: Space, study, optimum: SimOptimum) -> list[str]:
    """`sweeper demo`'s last lines: its winner, the simulator's optimum and how close it came; a
    NothingFeasible (exit 1) when no trial ranked, e.g. every level invalid on an overloaded machine."""
    winner = best_trial(study)
    if winner is None:
        raise NothingFeasible("the demo's sweep ranked no config (the line above names the failures); "
                              "run `sweeper demo` again on a quieter machine or with more --trials")
    return [f"winner: trial {winner.number}: " + " ".join(f"{k}={v}" for k, v in winner.params.items()),
            f"the simulator's optimum (modelled, {optimum.feasible} feasible of {optimum.total} configs): "
            f"{optimum.value:.2f} with " + " ".join(f"{k}={v}" for k, v in optimum.config.items()),
            format_distance_to_optimum(space, study, optimum.value)]


def _print_modelled_front(space: Space) -> None:
    # lazy for CLI start-up (cli/__init__.py)
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
