"""The simulator's exact optimum for a search space, from its performance model.

Each config goes through the same path as a real launch (the engine's argv and env, then the
simulator's own flag parser), so the number printed is what the server would be modelled to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sweeper.config import HostSpec, Space
from sweeper.engines import get_engine
from sweeper.errors import UserError
from sweeper.sim.config import SimConfig, sim_config_from
from sweeper.sim.failures import failure_of
from sweeper.sim.perf import modelled_level_metrics
from sweeper.sim.args import build_arg_parser
from sweeper.space import enumerate_configs, excluded_by_rule, violated_constraints

_MODELLED = {
    "output_throughput": lambda m: m.output_throughput,
    "request_throughput": lambda m: m.request_throughput,
    "median_ttft_ms": lambda m: m.ttft_ms,
    "median_itl_ms": lambda m: m.itl_ms,
}


@dataclass(frozen=True)
class SimOptimum:
    config: dict[str, Any]
    value: float
    feasible: int
    total: int


_PARSER = build_arg_parser()  # built once: enumerating a space parses tens of thousands of argvs


def sim_config_of(space: Space, config: dict[str, Any]) -> SimConfig:
    spec = get_engine("sim").build_launch_spec(space, config, HostSpec(transport="local"), 30000, "python")
    return sim_config_from(_PARSER.parse_args(list(spec.argv[3:])), spec.env)


def modelled_objective(space: Space, config: dict[str, Any]) -> float | None:
    """The modelled (first) objective of a config, or None when the simulator would fail it."""
    cfg = sim_config_of(space, config)
    if failure_of(cfg) is not None:
        return None
    workload, goal = space.workload, space.goals[0]  # the Pareto mode: its throughput objective
    metrics = modelled_level_metrics(cfg, workload.input_len, workload.output_len, goal.level)
    return _MODELLED[goal.metric](metrics)


def best_config(space: Space) -> SimOptimum:
    if space.engine != "sim":
        raise UserError(f"space {space.name!r} uses engine {space.engine!r}; `sim best` needs engine: sim")
    goal = space.goals[0]
    if goal.metric not in _MODELLED:
        raise UserError(f"the simulator models {', '.join(_MODELLED)}, not {goal.metric}")
    try:
        configs = list(enumerate_configs(space))
    except ValueError as exc:
        raise UserError(f"space {space.name!r} is not finite ({exc}); give every float a step") from None
    sign = 1.0 if goal.direction == "maximize" else -1.0
    best: tuple[float, dict] | None = None
    feasible = 0
    for config in configs:
        if violated_constraints(space, config) or excluded_by_rule(space, config):
            continue
        value = modelled_objective(space, config)
        if value is None:
            continue
        feasible += 1
        if best is None or sign * value > sign * best[0]:
            best = (value, config)
    if best is None:
        raise UserError(f"no config of space {space.name!r} runs on the simulator")
    return SimOptimum(config=best[1], value=best[0], feasible=feasible, total=len(configs))
