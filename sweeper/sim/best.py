"""The simulator's exact optimum for a search space, from its performance model.

Each config goes through the same path as a real launch (the engine's argv and env, then the
simulator's own flag parser), so the number printed is what the server would be modelled to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from sweeper.spec.hosts import HostSpec
from sweeper.spec.space import Space
from sweeper.engines import get_engine
from sweeper.errors import UserError
from sweeper.sim.config import SimConfig, sim_config_from
from sweeper.sim.failures import failure_of
from sweeper.sim.perf import modelled_level_metrics
from sweeper.sim.args import build_arg_parser
from sweeper.search.configs import config_key, enumerate_configs
from sweeper.spec.rules import excluded_by_rule, violated_constraints
from sweeper.search.pareto import front_keys

# The model has no spread between requests of one level (lockstep rounds), so a percentile of a
# latency is its modelled value.
_MODELLED = {
    "output_throughput": lambda m: m.output_throughput,
    "request_throughput": lambda m: m.request_throughput,
    "median_ttft_ms": lambda m: m.ttft_ms, "p99_ttft_ms": lambda m: m.ttft_ms,
    "median_itl_ms": lambda m: m.itl_ms, "p99_itl_ms": lambda m: m.itl_ms,
    "median_e2e_latency_ms": lambda m: m.e2e_latency_ms,
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
    metrics = modelled_level_metrics(cfg, workload.typical_input_len, workload.typical_output_len, goal.level)
    return _MODELLED[goal.metric](metrics)


def enumerated_sim_configs(space: Space, metrics: Sequence[str]) -> list[dict[str, Any]]:
    """Every config of a space `sim best` can model: engine sim, modelled goals, finite."""
    if space.engine != "sim":
        raise UserError(f"space {space.name!r} uses engine {space.engine!r}; `sim best` needs engine: sim")
    if unmodelled := [m for m in metrics if m not in _MODELLED]:
        raise UserError(f"the simulator models {', '.join(_MODELLED)}, not {', '.join(unmodelled)}")
    try:
        return list(enumerate_configs(space))
    except ValueError as exc:
        raise UserError(f"space {space.name!r} is not finite ({exc}); give every float a step") from None


def best_config(space: Space) -> SimOptimum:
    goal = space.goals[0]
    configs = enumerated_sim_configs(space, [goal.metric])
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


@dataclass(frozen=True)
class ModelledPoint:
    config: dict[str, Any]
    throughput: float
    latency: float


def modelled_pair(space: Space, config: dict[str, Any]) -> tuple[float, float] | None:
    """The Pareto mode's two objectives of a config on the model, or None when it is excluded by
    a rule or constraint or the simulator would fail it."""
    if violated_constraints(space, config) or excluded_by_rule(space, config):
        return None
    cfg = sim_config_of(space, config)
    if failure_of(cfg) is not None:
        return None
    throughput, latency = space.goals
    w = space.workload
    at_throughput = modelled_level_metrics(cfg, w.typical_input_len, w.typical_output_len, throughput.level)
    at_latency = modelled_level_metrics(cfg, w.typical_input_len, w.typical_output_len, latency.level)
    return _MODELLED[throughput.metric](at_throughput), _MODELLED[latency.metric](at_latency)


def modelled_front(space: Space) -> tuple[list[ModelledPoint], int, int]:
    """The exact Pareto front of a two-objective space on the model, by throughput (best first);
    with the counts of feasible and of all configs."""
    configs = enumerated_sim_configs(space, [goal.metric for goal in space.goals])
    points = {config_key(c): (c, pair) for c in configs if (pair := modelled_pair(space, c)) is not None}
    if not points:
        raise UserError(f"no config of space {space.name!r} runs on the simulator")
    keys = front_keys({k: pair for k, (_, pair) in points.items()}, (True, False))
    front = [ModelledPoint(points[k][0], *points[k][1]) for k in keys]
    return sorted(front, key=lambda p: (-p.throughput, p.latency)), len(points), len(configs)
