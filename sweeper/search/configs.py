"""A search space turned into Optuna suggestions, checked against its constraints, enumerated
when finite, and keyed canonically so a config is launched once."""

from __future__ import annotations

import itertools
import json
from decimal import Decimal
from typing import Any, Iterator

import optuna

from sweeper.spec.params import BoolParam, CategoricalParam, FloatParam, IntParam
from sweeper.spec.space import Space
from sweeper.spec.expr import Missing, parse_expr

Config = dict[str, Any]


def is_active(space: Space, name: str, config: Config) -> bool:
    """A parameter with `when:` exists only when every named parameter has one of the values."""
    for other, wanted in space.target(name).when.items():
        allowed = wanted if isinstance(wanted, list) else [wanted]
        if other not in config or config[other] not in allowed:
            return False
    return True


def suggest_config(trial: optuna.Trial, space: Space) -> Config:
    """Ask the trial for a value of every active parameter, in file order."""
    config: Config = {}
    for name, param in space.parameters.items():
        if not is_active(space, name, config):
            continue
        match param:
            case CategoricalParam():
                config[name] = trial.suggest_categorical(name, param.choices)
            case BoolParam():
                config[name] = trial.suggest_categorical(name, [False, True])
            case IntParam():
                config[name] = trial.suggest_int(name, param.low, param.high, step=param.step, log=param.log)
            case FloatParam():
                config[name] = trial.suggest_float(name, param.low, param.high, step=param.step, log=param.log)
    return with_derived(space, config)


def with_derived(space: Space, sampled: Config) -> Config:
    """The sampled values plus the derived ones (computed, never sampled)."""
    config = dict(sampled)
    for name, derived in space.derived.items():
        if is_active(space, name, config):
            try:
                config[name] = parse_expr(derived.expr).evaluate(sampled)
            except Missing:
                continue
    return config


def config_key(config: Config) -> str:
    """Canonical text of a config: equal configs give equal keys whatever their order."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def parameter_values(param) -> list[Any]:
    """Every value of a finite parameter (a float needs a step)."""
    match param:
        case CategoricalParam():
            return list(param.choices)
        case BoolParam():
            return [False, True]
        case IntParam():
            if param.log:
                return list(range(param.low, param.high + 1))
            return list(range(param.low, param.high + 1, param.step))
        case FloatParam():
            if param.step is None:
                raise ValueError("a float parameter without a step has infinitely many values")
            low, high, step = Decimal(str(param.low)), Decimal(str(param.high)), Decimal(str(param.step))
            count = int((high - low) / step) + 1
            return [float(low + i * step) for i in range(count)]
    raise TypeError(param)


def enumerate_configs(space: Space) -> Iterator[Config]:
    """Every config of a finite space that its conditions allow (constraints not applied)."""
    seen: set[str] = set()
    names = list(space.parameters)
    value_lists = [parameter_values(space.parameters[n]) for n in names]
    for combo in itertools.product(*value_lists):
        config: Config = {}
        for name, value in zip(names, combo):
            if is_active(space, name, config):
                config[name] = value
        config = with_derived(space, config)
        key = config_key(config)
        if key not in seen:
            seen.add(key)
            yield config


def count_configs(space: Space) -> int | None:
    """The number of distinct configs, or None when the space is not finite."""
    try:
        return sum(1 for _ in enumerate_configs(space))
    except ValueError:
        return None


def config_problem(space: Space, params: Config) -> str | None:
    """Why sampled values are not a config of `space` (None when they are): a parameter it lacks
    or misses, a value outside a parameter's domain, a broken constraint."""
    config: Config = {}
    for name, param in space.parameters.items():
        if not is_active(space, name, config):
            continue
        if name not in params:
            return f"no value for {name}"
        value = params[name]
        if isinstance(param, FloatParam) and param.step is None:
            if not isinstance(value, (int, float)) or not param.low <= value <= param.high:
                return f"{name}={value!r} outside [{param.low}, {param.high}]"
        elif value not in parameter_values(param):
            return f"{name}={value!r} not one of its values"
        config[name] = value
    if extra := sorted(set(params) - set(config)):
        return f"not parameters of this space (or inactive): {', '.join(extra)}"
    for constraint, text in zip(space.parsed_constraints(), space.constraints):
        try:
            if not constraint.evaluate(with_derived(space, config)):
                return f"breaks constraint {text}"
        except Missing:
            continue
    return None


def lever_values(param) -> list[Any]:
    """The values a move may give a lever (a stepless float: nine points of its range)."""
    try:
        return parameter_values(param)
    except ValueError:
        return [param.low + (param.high - param.low) * i / 8 for i in range(9)]


def is_ordinal(param) -> bool:
    """Ordered values, where a move goes to a neighbour first (sizes, fractions)."""
    if isinstance(param, (IntParam, FloatParam)):
        return True
    return isinstance(param, CategoricalParam) and all(
        isinstance(c, (int, float)) and not isinstance(c, bool) for c in param.choices)
