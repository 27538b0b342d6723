"""The checks across a space's keys that one model's validation cannot see (conditions naming
parameters above them, expressions over the parameters' values, seeds, objectives against the
workload's ladder, the open-loop and prompt-source keys): each a (key path, message) problem."""

from __future__ import annotations

import itertools
import json
from typing import Any

from sweeper.errors import did_you_mean
from sweeper.outcomes import FAIRNESS_METRICS, LATENCY_METRICS, PER_GPU_METRIC, THROUGHPUT_METRICS
from sweeper.spec.engine_traits import PARALLEL_FLAGS
from sweeper.spec.expr import MAX_PROBES, ExprError, Missing, first_type_error, parse_expr
from sweeper.spec.params import BoolParam, CategoricalParam, IntParam, seed_value_problem
from sweeper.spec.space import LengthSpec, Space, Workload
from sweeper.spec.yamlfile import KeyPath


def cross_check_space(space: Space) -> list[tuple[KeyPath, str]]:
    """Every problem across the space's keys, as (key path, message); none: the space holds together."""
    names = list(space.parameters)
    problems: list[tuple[KeyPath, str]] = []
    for index, name in enumerate(names):
        for other, value in space.parameters[name].when.items():
            if other not in names[:index]:
                problems.append((("parameters", name, "when", other),
                                 f"a condition must name a parameter defined above {name!r}"))
    for name, derived in space.derived.items():
        if name in space.parameters:
            problems.append((("derived", name), "already a sampled parameter"))
        for other in derived.when:
            if other not in names:
                problems.append((("derived", name, "when", other), "a condition must name a sampled parameter"))
    problems += _check_expressions(space)
    seed_names = [seed.name for seed in space.seeds]
    for index, seed in enumerate(space.seeds):
        for key, value in seed.params.items():
            if key not in space.parameters:
                problems.append((("seeds", index, "params", key), "not a parameter of this space"
                                 + did_you_mean(key, space.parameters)))
            elif (problem := seed_value_problem(space.parameters[key], value)) is not None:
                problems.append((("seeds", index, "params", key), problem))
    if space.reference is not None and space.reference not in seed_names:
        problems.append((("reference",), f"no seed named {space.reference!r}"))
    problems += _check_objectives(space)
    problems += _check_gpu_count(space)
    level = space.objective.level
    if not space.finds_capacity and (problem := _level_problem(space.workload, level)):
        problems.append((("objective", "level"), problem))
    problems += _check_prompt_sources(space.workload)
    problems += _check_open_loop(space.workload)
    if space.perf_target and (problem := _level_problem(space.workload, space.perf_target.level)):
        problems.append((("target", "level"), problem))
    return problems


def _check_open_loop(workload: Workload) -> list[tuple[KeyPath, str]]:
    """The open-loop keys go together, and with what an open loop can do."""
    if not workload.open_loop:
        given = [key for key in ("arrival", "max_concurrency") if key in workload.model_fields_set
                 and getattr(workload, key) is not None]
        return [(("workload", key), "shapes open-loop levels: set workload.request_rates too") for key in given]
    problems: list[tuple[KeyPath, str]] = []
    if workload.precision is not None:
        problems.append((("workload", "precision"), "drives closed-loop levels; an open-loop level sends "
                         "max(requests_per_level, 5 s of arrivals): drop precision or request_rates"))
    if workload.load == "native":
        problems.append((("workload", "request_rates"), "open-loop levels need sweeper's own load client "
                         "(load: sweeper)"))
    return problems


def _level_problem(workload: Workload, level: float | None) -> str | None:
    """Why an objective's `level:` is not a level of the workload's ladder (None: it is)."""
    if level is None:
        return None
    if workload.open_loop:
        if level not in workload.request_rates:
            return f"{level:g} is not one of workload.request_rates (the ladder is open loop: levels are rates)"
        return None
    if isinstance(level, float) and not level.is_integer() or level not in workload.concurrency:
        return f"{level:g} is not one of workload.concurrency"
    return None


def _check_prompt_sources(workload: Workload) -> list[tuple[KeyPath, str]]:
    problems: list[tuple[KeyPath, str]] = []
    custom = [key for key in ("dataset", "shared_prefix") if getattr(workload, key) is not None]
    custom += [key for key in ("input_len", "output_len") if isinstance(getattr(workload, key), LengthSpec)]
    if workload.load == "native" and custom:
        problems.append((("workload", custom[0]), "load: native runs the engine's own random prompts; "
                         "datasets, shared prefixes and length distributions need load: sweeper"))
    if workload.dataset_format is not None and workload.dataset is None:
        problems.append((("workload", "dataset_format"), "needs workload.dataset"))
    return problems


def _expressions(space: Space) -> list[tuple[KeyPath, str, set[str]]]:
    """(key path, source, the names it may use) of every expression in the space."""
    sampled = set(space.parameters)
    return ([(("derived", name, "expr"), d.expr, sampled) for name, d in space.derived.items()]
            + [(("constraints", i), source, space.names) for i, source in enumerate(space.constraints)]
            + [(("rules", i, "forbid"), rule.forbid, space.names) for i, rule in enumerate(space.rules)]
            + ([(("gpus",), space.gpus, space.names)] if space.gpus is not None else []))


def _check_expressions(space: Space) -> list[tuple[KeyPath, str]]:
    """Each expression parses, names only known parameters, and evaluates on every combination of
    the values they can take (a categorical mixing 'auto' and numbers under `<` is refused here)."""
    problems: list[tuple[KeyPath, str]] = []
    domains = _value_domains(space)
    for path, source, known in _expressions(space):
        try:
            expr = parse_expr(source, known)
        except ExprError as exc:
            problems.append((path, str(exc)))
            continue
        if reason := first_type_error(expr, domains):
            problems.append((path, reason))
    return problems


def _value_domains(space: Space) -> dict[str, list[Any]]:
    """Values each parameter can take, for probing expressions: a categorical's choices, a range's
    ends and middle, a bool's two values, and each derived value over its parameters' domains."""
    domains: dict[str, list[Any]] = {}
    for name, param in space.parameters.items():
        if isinstance(param, CategoricalParam):
            domains[name] = list(param.choices)
        elif isinstance(param, BoolParam):
            domains[name] = [False, True]
        else:
            middle = (param.low + param.high) // 2 if isinstance(param, IntParam) else (param.low + param.high) / 2
            domains[name] = [param.low, middle, param.high]
    for name, derived in space.derived.items():
        try:
            expr = parse_expr(derived.expr, set(space.parameters))
        except ExprError:
            continue  # reported by _check_expressions
        names = sorted(expr.names)
        values = []
        for combo in itertools.islice(itertools.product(*(domains[n] for n in names)), MAX_PROBES):
            try:
                values.append(expr.evaluate(dict(zip(names, combo))))
            except (ExprError, Missing):
                continue
        domains[name] = list({json.dumps(v, default=str): v for v in values}.values())
    return domains


def _check_capacity(space: Space) -> list[tuple[KeyPath, str]]:
    """max_load_within_slo needs an SLO to search against, is maximised, and measures with
    sweeper's own client."""
    if not space.finds_capacity:
        return []
    problems: list[tuple[KeyPath, str]] = []
    if space.slo.p99_ttft_ms is None and space.slo.p99_tpot_ms is None:
        problems.append((("objective", "metric"), "max_load_within_slo needs slo: {p99_ttft_ms: MS} and/or "
                                                  "{p99_tpot_ms: MS} to search against"))
    if space.objective.direction != "maximize":
        problems.append((("objective", "direction"), "max_load_within_slo is maximised"))
    if space.objective.level is not None:
        problems.append((("objective", "level"), "max_load_within_slo searches the load: it reads no fixed level"))
    if space.workload.load != "sweeper":
        problems.append((("workload", "load"), "max_load_within_slo measures with sweeper's client (load: sweeper)"))
    rates = space.workload.request_rates
    if rates is not None and len(rates) != 1:
        problems.append((("workload", "request_rates"), "max_load_within_slo over the rate searches from one start "
                         f"rate: give request_rates: [START] (got {len(rates)} rates)"))
    elif rates is not None and space.workload.capacity_max_rate < rates[0]:
        problems.append((("workload", "capacity_max_rate"), f"{space.workload.capacity_max_rate:g} is below the "
                         f"start rate {rates[0]:g} (workload.request_rates)"))
    return problems


def _check_objectives(space: Space) -> list[tuple[KeyPath, str]]:
    if space.objectives is None:
        return _check_capacity(space)
    if "objective" in space.model_fields_set:
        return [(("objectives",), "give either 'objective' (one metric) or 'objectives' (two: the "
                                  "Pareto mode), not both")]
    problems: list[tuple[KeyPath, str]] = []
    wanted = [("a throughput to maximise", THROUGHPUT_METRICS + FAIRNESS_METRICS), ("a latency to minimise", LATENCY_METRICS)]
    for index, (term, (what, metrics)) in enumerate(zip(space.objectives, wanted)):
        if term.metric not in metrics:
            problems.append((("objectives", index, "metric"), f"objective {index + 1} must be {what}: one of "
                             f"{', '.join(metrics)} (got {term.metric!r})"))
        if problem := _level_problem(space.workload, term.level):
            problems.append((("objectives", index, "level"), problem))
    return problems


def _check_gpu_count(space: Space) -> list[tuple[KeyPath, str]]:
    """A per-GPU objective (or target) needs each config's GPU count: the space's `gpus:`, else the
    engine's parallel sizes in its argv; an engine that declares none (llama.cpp, transformers)
    would score every trial 0."""
    if space.gpus is not None:
        return []
    if PARALLEL_FLAGS.get(space.engine):
        return []
    terms = ([(("objective", "metric"), space.objective)] if space.objectives is None else
             [(("objectives", i, "metric"), term) for i, term in enumerate(space.objectives)])
    terms.append((("target", "metric"), space.perf_target))
    return [(key, f"{PER_GPU_METRIC} needs the GPUs each config runs on, and {space.engine} does not say (no "
                  "parallel-size flags): add gpus: to the space (an expression of the parameters, e.g. "
                  'gpus: "1" or gpus: "tp * dp")')
            for key, term in terms if term is not None and term.metric == PER_GPU_METRIC]

