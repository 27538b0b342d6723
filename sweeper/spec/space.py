"""Search-space files: the typed models (parameters, derived values, rules, workload, objectives,
correctness check) and the loader that cross-checks them."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import Field, field_validator, model_validator

from sweeper.errors import ConfigError, did_you_mean
from sweeper.levels import Level, Rate, goal_name, workload_levels
from sweeper.outcomes import (CAPACITY_METRIC, FAIRNESS_METRICS, LATENCY_METRICS, PER_GPU_METRIC, THROUGHPUT_METRICS,
                              MetricName)
from sweeper.spaces import packaged_spaces  # the names a SPACE argument may also be
from sweeper.spec.datasets import DatasetError, load_dataset
from sweeper.spec.engine_traits import PARALLEL_FLAGS, request_api
from sweeper.spec.expr import MAX_PROBES, Expr, ExprError, Missing, first_type_error, parse_expr
from sweeper.spec.loading import Strict, validate_model
from sweeper.spec.yamlfile import KeyPath, format_path, line_of, parse_yaml_with_lines

Scalar = Union[bool, int, float, str, None]


class _Param(Strict):
    flag: str | None = Field(None, pattern=r"^-{1,2}[A-Za-z0-9][A-Za-z0-9_.-]*$")
    env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    when: dict[str, Scalar | list[Scalar]] = {}
    help: str = ""

    @model_validator(mode="after")
    def _one_target(self):
        if (self.flag is None) == (self.env is None):
            raise ValueError("give exactly one of 'flag' (a CLI flag) or 'env' (an environment variable)")
        return self


class CategoricalParam(_Param):
    type: Literal["categorical"]
    choices: list[Scalar] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self):
        if len({json.dumps(c) for c in self.choices}) != len(self.choices):
            raise ValueError("choices must be unique")
        return self


class IntParam(_Param):
    type: Literal["int"]
    low: int
    high: int
    step: int = Field(1, ge=1)
    log: bool = False

    @model_validator(mode="after")
    def _range(self):
        _check_range(self.low, self.high, self.log, self.step != 1)
        return self


class FloatParam(_Param):
    type: Literal["float"]
    low: float
    high: float
    step: float | None = Field(None, gt=0)
    log: bool = False

    @model_validator(mode="after")
    def _range(self):
        _check_range(self.low, self.high, self.log, self.step is not None)
        return self


class BoolParam(_Param):
    """A bool mapped to a flag is the bare flag when true and absent when false; mapped to an
    environment variable it is "1" or "0"."""

    type: Literal["bool"]


def _check_range(low: float, high: float, log: bool, stepped: bool) -> None:
    if low >= high:
        raise ValueError(f"low ({low}) must be below high ({high})")
    if log and low <= 0:
        raise ValueError("a log-scaled range needs low > 0")
    if log and stepped:
        raise ValueError("'log' and 'step' cannot be combined")


Param = Annotated[
    Union[CategoricalParam, IntParam, FloatParam, BoolParam], Field(discriminator="type")
]


class DerivedParam(_Param):
    """A value computed from the sampled parameters (never sampled itself), e.g. `ep_size: tp_size`."""

    expr: str


class Rule(Strict):
    """A static incompatibility: configs for which `forbid` is true are recorded infeasible with
    `reason`, without a launch."""

    forbid: str
    reason: str


class Slo(Strict):
    """Service-level limits at the objective level; a config that breaks one is infeasible, and the
    load ladder stops as soon as a level breaks it (latency only grows with concurrency)."""

    p99_ttft_ms: float | None = Field(None, gt=0)
    p99_tpot_ms: float | None = Field(None, gt=0)


class Search(Strict):
    sampler: Literal["auto", "gp", "model", "hybrid", "local", "tpe", "brute", "random", "grid"] = "auto"
    abandon_below: float = Field(0.0, ge=0, le=1, description=(
        "stop the ladder when even a linear extrapolation cannot reach this fraction of the best"))


class Seed(Strict):
    name: str
    params: dict[str, Scalar]


# A precision-driven level's time cap when the workload gives none (modelled seconds): on the
# simulator a 2% level took ~200 modelled s at C=8 (bench/README.md "Precision-driven levels").
DEFAULT_MAX_SECONDS = 300.0
# What a steady-state level (measure: steady) sends until when the workload sets no precision:
# the 95% CI half-width of its output tok/s. 1% separates configs 3% apart (issue 29); on vLLM at
# C=128 it took ~N s (bench/gpu/README.md, "Where the variance comes from").
DEFAULT_STEADY_PRECISION = 0.01
# ...and its time cap when the level is steady by the engine's default alone (nothing set): on vLLM
# at C=128 half the levels reached 1% within 15 s (half-widths 0.3-0.9%), the others drifted with
# half-widths of 2-6% that more time would not have narrowed much (the server's CPU-bound
# processes, bench/gpu/README.md): a minute bounds what such a level costs a ladder.
DEFAULT_STEADY_MAX_SECONDS = 60.0

# The client-lag validity bar's one default (loadgen/metrics.py reads it): a level whose client
# event loop lagged more (p99) measured the client, not the server.
MAX_CLIENT_LAG_P99_MS = 5.0


class LengthSpec(Strict):
    """Token lengths drawn per request, guidellm-style (spec/datasets.py LengthDistribution):
    fixed at `mean`, uniform in [min, max], normal (mean, std) or lognormal (mean, and std or
    sigma, the spread of the log), each clipped to [min, max]."""

    dist: Literal["fixed", "uniform", "normal", "lognormal"]
    mean: float | None = Field(None, gt=0)
    std: float = Field(0.0, ge=0)
    sigma: float | None = Field(None, gt=0, description="lognormal: std of log(length)")
    min: int = Field(1, ge=1)
    max: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _complete(self):
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        if self.dist == "uniform" and self.max is None:
            raise ValueError("a uniform length needs min and max")
        if self.dist != "uniform" and self.mean is None:
            raise ValueError(f"a {self.dist} length needs a mean")
        if self.dist == "lognormal" and self.sigma is None and not self.std:
            raise ValueError("a lognormal length needs std (of the lengths) or sigma (of their log)")
        if self.dist != "lognormal" and self.sigma is not None:
            raise ValueError("sigma is for dist: lognormal (use std)")
        return self

    @property
    def typical(self) -> int:
        """One representative length (the mean; a uniform's middle)."""
        return round(self.mean if self.mean is not None else (self.min + (self.max or self.min)) / 2)


class SharedPrefix(Strict):
    """`groups` seeded system prompts of `tokens` tokens; each request starts with one of them."""

    tokens: int = Field(ge=1)
    groups: int = Field(1, ge=1)


class Workload(Strict):
    input_len: Annotated[int, Field(ge=1)] | LengthSpec = 128
    output_len: Annotated[int, Field(ge=2)] | LengthSpec = 32
    concurrency: list[int] = Field([1, 2, 4, 8, 16], min_length=1)
    # open-loop levels (docs/configuration.md "Workload keys"): set, each level is an open loop at one of these
    # rates (requests per modelled second) and `concurrency` is not the ladder
    request_rates: list[float] | None = Field(None, min_length=1, description=(
        "open-loop levels: requests/s, positive and increasing"))
    arrival: Literal["poisson", "fixed"] = Field("poisson", description="open loop: Poisson or evenly spaced")
    max_concurrency: int | None = Field(None, ge=1, description=(
        "open loop: at most this many requests in flight (a request due while full waits); default none"))
    requests_per_level: int = Field(0, ge=0, description="at least this many requests per level")
    min_rounds: int = Field(2, ge=1, description="and at least this many rounds of C requests")
    warmup_rounds: int = Field(1, ge=0, description="rounds of C requests sent first, not measured")
    request_timeout_s: float = Field(600.0, gt=0)
    seed: int = 0
    # measurement options (sweeper/loadgen; docs/configuration.md "Workload keys")
    repeats: int = Field(1, ge=1, description="measured runs per level; the median one is kept")
    slo_ttft_ms: float | None = Field(None, gt=0, description="TTFT SLO for goodput")
    slo_tpot_ms: float | None = Field(None, gt=0, description="TPOT SLO for goodput")
    min_tokens: bool = Field(False, description="also send min_tokens = output_len")
    continuous_usage_stats: bool = Field(True, description="ask for usage in every chunk")
    # sweeper: sweeper's own streaming client; native: the engine's own benchmark as the load, run
    # on the host, its JSON read into the level record (loadgen/native_results.py; vLLM: vllm bench serve)
    load: Literal["sweeper", "native"] = "sweeper"
    stall_timeout_s: float | None = Field(None, gt=0, description="no byte this long: a hang (default: launch's)")
    max_client_lag_ms: float = Field(MAX_CLIENT_LAG_P99_MS, gt=0, description="client event-loop p99 lag above this: "
                                     "the level is invalid (raise it on a shared, busy controller)")
    # SLO capacity search (objective max_load_within_slo; docs/commands.md "SLO capacity")
    capacity_max_concurrency: int = Field(256, ge=1, description="the search's ceiling")
    capacity_resolution: int = Field(1, ge=1, description="stop when holding and failing C are this close")
    # ...over the request rate, with request_rates: [start] (as `sweeper load --find-capacity --rate`)
    capacity_max_rate: float = Field(1000.0, gt=0, description="a rate search's ceiling (req/s)")
    capacity_rate_resolution: float = Field(0.05, gt=0, lt=1, description=(
        "a rate search stops when failing and holding rates are within this fraction of the holding one"))
    # prompt sources (docs/measurement.md "Prompt sources and shared prefixes"); paths relative to the space file
    dataset: str | None = Field(None, description="ShareGPT JSON or JSONL file of prompts, sent verbatim")
    dataset_format: Literal["sharegpt", "jsonl"] | None = Field(None, description="default: from the content")
    tokenizer: str | None = Field(None, description="tokenizer.json (or its folder): prompt token counts")
    shared_prefix: SharedPrefix | None = None
    # precision-driven levels (loadgen/precision.py; docs/measurement.md "Precision-driven levels"): unset, a
    # level is warmup_rounds + repeats runs of a fixed size, as before
    # how a closed-loop level is measured (README "Steady-state levels"): steady sends until its
    # precision (a time window, ramp-up and drain left out); rounds sends warmup_rounds + repeats
    # fixed runs; auto is the engine's choice (steady on real engines, rounds on the simulator)
    measure: Literal["auto", "steady", "rounds"] = "auto"
    ramp: Literal["stagger", "burst"] = Field("stagger", description=(
        "steady levels: the first C requests ask for staggered lengths (stagger) or all start alike (burst)"))
    precision: float | None = Field(None, gt=0, lt=1, description=(
        "send until the 95% CI of output tok/s is within this relative half-width (default 0.01 when steady)"))
    max_seconds: float | None = Field(None, gt=0, description=(
        "with precision: a level's cap in seconds (default DEFAULT_MAX_SECONDS)"))
    max_requests: int | None = Field(None, ge=1, description="with precision: a level's cap in requests")

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, levels: list[int]) -> list[int]:
        if any(c < 1 for c in levels) or levels != sorted(set(levels)):
            raise ValueError("concurrency levels must be positive, increasing and unique")
        return levels

    @field_validator("request_rates")
    @classmethod
    def _rates(cls, rates: list[float] | None) -> list[float] | None:
        if rates is not None and (any(not math.isfinite(r) or r <= 0 for r in rates) or rates != sorted(set(rates))):
            raise ValueError("request rates must be positive, finite, increasing and unique (requests per second)")
        return rates

    @property
    def open_loop(self) -> bool:
        """Each level is an open loop at a request rate (request_rates is set)."""
        return self.request_rates is not None

    @property
    def levels(self) -> list[Level]:
        """The ladder: the request rates (open loop) when set, else the concurrencies."""
        return workload_levels(self.concurrency, self.request_rates)

    @property
    def typical_input_len(self) -> int:
        return self.input_len if isinstance(self.input_len, int) else self.input_len.typical

    @property
    def typical_output_len(self) -> int:
        return self.output_len if isinstance(self.output_len, int) else self.output_len.typical
    def steady(self, engine_measure: str = "rounds") -> bool:
        """Whether closed-loop levels are steady-state (precision-driven): asked for, implied by a
        precision, or the engine's default (`engine_measure`) under auto; never with native load."""
        if self.measure != "auto":
            return self.measure == "steady"
        capped = self.max_seconds is not None or self.max_requests is not None
        return self.precision is not None or capped or (engine_measure == "steady" and self.load == "sweeper")

    def for_engine(self, engine_measure: str) -> "Workload":
        """The workload with `measure` resolved for an engine (auto -> steady or rounds) and a
        steady level's precision filled in."""
        steady = self.steady(engine_measure)
        update: dict = {"measure": "steady" if steady else "rounds",
                        "precision": (self.precision or DEFAULT_STEADY_PRECISION) if steady else None}
        if steady and (self.precision, self.max_seconds, self.max_requests) == (None, None, None):
            update["max_seconds"] = DEFAULT_STEADY_MAX_SECONDS
        return self.model_copy(update=update)

    @property
    def level_precision(self) -> float | None:
        """The precision a closed-loop level sends until; None: fixed rounds."""
        return (self.precision or DEFAULT_STEADY_PRECISION) if self.steady() else None

    @model_validator(mode="after")
    def _caps_need_precision(self):
        if self.measure == "rounds" and (self.precision, self.max_seconds, self.max_requests) != (None, None, None):
            raise ValueError("precision, max_seconds and max_requests drive steady levels: drop them or "
                             "set measure: steady")
        if self.measure == "steady" and self.load == "native":
            raise ValueError("measure: steady needs sweeper's own load client (load: sweeper)")
        if self.precision is not None and self.load == "native":
            raise ValueError("'precision' needs sweeper's own load client (load: sweeper)")
        return self


class Objective(Strict):
    metric: MetricName = "output_throughput"
    level: int | float | None = Field(None, description="concurrency level (or request rate); default the highest")
    direction: Literal["maximize", "minimize"] = "maximize"


class ObjectiveTerm(Strict):
    """One of the two objectives of the Pareto mode (`objectives:`); its direction follows from
    the metric: a throughput is maximised, a latency minimised."""

    metric: MetricName
    level: int | float | None = Field(None, description="concurrency level (or request rate); default the "
                                                        "highest for a throughput, the lowest for a latency")


@dataclass(frozen=True)
class Goal:
    """One objective as the study optimises it: a metric read at a level, and a direction."""

    metric: MetricName
    level: Level
    direction: Literal["maximize", "minimize"]

    @property
    def name(self) -> str:
        return self.metric if self.metric == CAPACITY_METRIC else goal_name(self.metric, self.level)


class Target(Strict):
    """What the deployment must reach: the report gives the gap from the best config to it."""

    metric: MetricName = "output_throughput"
    value: float = Field(gt=0)
    level: int | float | None = Field(None, description="concurrency level (or request rate); default the highest")


class Budget(Strict):
    trials: int = Field(16, ge=1, description="real GPU evaluations; duplicates are free")


class Launch(Strict):
    ready_timeout_s: float = Field(900.0, gt=0)
    stall_timeout_s: float = Field(300.0, gt=0, description="no new log line and port closed: hung")
    stop_grace_s: float = Field(30.0, ge=0)
    poll_interval_s: float = Field(0.25, gt=0, le=2.0)


DEFAULT_CHECK_PROMPTS = (
    "The capital of France is",
    "Water boils at a temperature of",
    "def fibonacci(n):",
    "The three primary colors are",
)


class OutputCheck(Strict):
    prompt: str = "The capital of France is"
    max_tokens: int = Field(16, ge=1)
    # auto: compare with the study's reference, or run the garbage detector before there is one;
    # reference-only: compare with the reference when there is one, never run the detector;
    # none: only require that a generation succeeds (random-weight models, whose near-tied logits
    # make greedy tokens flip with any numerics-changing lever: threads, batch, KV type)
    mode: Literal["auto", "reference-only", "none"] = "auto"
    # The correctness gate (sweeper/trial/gate.py; docs/measurement.md "The correctness gate")
    prompts: list[str] = Field(default_factory=lambda: list(DEFAULT_CHECK_PROMPTS), min_length=1,
                               description="greedy prompt set; setting only `prompt` checks that one")
    k_tokens: int = Field(8, ge=1, description="first K greedy tokens compared with the reference")
    min_agreement: float = Field(0.6, ge=0, le=1, description="share of compared tokens that must agree")
    max_logprob_diff: float = Field(0.5, gt=0, description="mean |prompt logprob - reference|, nats")
    logprobs: bool = Field(True, description="ask for logprobs (tokens and the prompt fingerprint)")
    reference_file: str | None = Field(None, description="reference outputs (JSON) instead of a seed's")

    @property
    def prompt_set(self) -> list[str]:
        if "prompts" not in self.model_fields_set and "prompt" in self.model_fields_set:
            return [self.prompt]  # a space that names one prompt keeps its single-prompt check
        return list(self.prompts)


class Space(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    engine: Literal["sim", "sglang", "llamacpp", "vllm", "transformers"]
    model: str
    description: str = ""
    fixed_flags: dict[str, Scalar] = {}
    fixed_env: dict[str, str] = {}
    parameters: dict[str, Param] = Field(min_length=1)
    derived: dict[str, DerivedParam] = {}
    constraints: list[str] = []
    rules: list[Rule] = []
    seeds: list[Seed] = []
    reference: str | None = Field(None, description="name of the seed whose output is the reference")
    workload: Workload = Workload()
    objective: Objective = Objective()
    # the Pareto mode: [throughput objective, latency objective] instead of `objective`
    objectives: list[ObjectiveTerm] | None = Field(None, min_length=2, max_length=2)
    slo: Slo = Slo()
    search: Search = Search()
    # the YAML key `target`; the attribute has another name because Space.target(name) is a method
    perf_target: Target | None = Field(None, alias="target")
    budget: Budget = Budget()
    launch: Launch = Launch()
    check: OutputCheck = OutputCheck()
    # GPUs a config needs, an expression over its parameters (e.g. "tp_size"); with a host's
    # gpu_sets, a config that fits in one set runs there. None: every config takes the whole host.
    gpus: str | None = None

    @property
    def is_pareto(self) -> bool:
        """Two objectives (throughput up, latency down) and a Pareto front instead of one best."""
        return self.objectives is not None

    @property
    def goals(self) -> list[Goal]:
        """What the study optimises, in the order of its values: one goal, or the Pareto pair."""
        levels = self.workload.levels
        if self.objectives is None:
            return [Goal(self.objective.metric, self.level_of(self.objective.level, max(levels)),
                         self.objective.direction)]
        throughput, latency = self.objectives
        return [Goal(throughput.metric, self.level_of(throughput.level, max(levels)), "maximize"),
                Goal(latency.metric, self.level_of(latency.level, min(levels)), "minimize")]

    def level_of(self, value: float | None, default: Level) -> Level:
        """An objective's `level:` as a level of this workload (a Rate with request_rates)."""
        if value is None:
            return default
        return Rate(value) if self.workload.open_loop else int(value)

    @property
    def finds_capacity(self) -> bool:
        """The objective is the SLO capacity: each trial searches its load axis (no fixed ladder)."""
        return self.objectives is None and self.objective.metric == CAPACITY_METRIC

    @property
    def objective_level(self) -> Level:
        """The highest level an objective reads: SLOs count up to it, and it must be measured."""
        return max(goal.level for goal in self.goals)

    @property
    def names(self) -> set[str]:
        """Every name a config can hold: sampled and derived parameters."""
        return set(self.parameters) | set(self.derived)

    def target(self, name: str) -> "_Param":
        """Where a config value goes (its flag or environment variable)."""
        return self.parameters[name] if name in self.parameters else self.derived[name]

    def parsed_constraints(self) -> list[Expr]:
        return [parse_expr(c, self.names) for c in self.constraints]

    def parsed_rules(self) -> list[tuple[Expr, str]]:
        return [(parse_expr(rule.forbid, self.names), rule.reason) for rule in self.rules]


# ---------------------------------------------------------------- loading

def load_space(path: Path) -> Space:
    if not path.is_file():
        names = sorted(packaged_spaces())
        raise ConfigError(str(path), "", f"file not found (or a packaged space: {', '.join(names)})"
                          + did_you_mean(str(path).removesuffix(".yaml"), names))
    text = path.read_text()
    return check_workload_files(resolve_workload_paths(parse_space(text, str(path)), path.parent), text, str(path))


def resolve_workload_paths(space: Space, base: Path) -> Space:
    """The workload's dataset and tokenizer paths taken from the space file's folder."""
    updates = {key: str((base / value).expanduser()) for key in ("dataset", "tokenizer")
               if (value := getattr(space.workload, key)) and not Path(value).expanduser().is_absolute()}
    return space.model_copy(update={"workload": space.workload.model_copy(update=updates)}) if updates else space


def check_workload_files(space: Space, text: str, source: str) -> Space:
    """A dataset that cannot be read is refused when the space loads (nothing is launched): one
    line naming the dataset file and its record."""
    workload = space.workload
    if workload.dataset is None:
        return space
    try:
        records = load_dataset(Path(workload.dataset), workload.dataset_format)
        api = request_api(space.engine)
        if api != "chat" and (chat := next((i for i, r in enumerate(records) if r.messages), None)) is not None:
            raise DatasetError(f"{workload.dataset}: record {chat + 1} has chat \"messages\", but {space.engine} "
                               f"is sent {api} requests (write \"prompt\" records)")
    except DatasetError as exc:
        _, lines = parse_yaml_with_lines(text, source)
        raise ConfigError(source, "workload.dataset", str(exc), line_of(lines, ("workload", "dataset"))) from None
    return space


def parse_space(text: str, source: str) -> Space:
    duplicates: list[ConfigError] = []
    data, lines = parse_yaml_with_lines(text, source, duplicates)
    if not isinstance(data, dict):
        raise ConfigError(source, "", "expected a mapping at the top level")
    space = validate_model(source, data, lines, Space, duplicates)
    problems = duplicates + [ConfigError(source, format_path(path), message, line_of(lines, path))
                             for path, message in _cross_check_space(space)]
    if problems:
        raise ConfigError.all_of(sorted(problems, key=lambda e: e.line or 0))
    return space


def space_fingerprint(space: Space) -> str:
    """A content hash of the validated space: formatting and comments do not change it."""
    data = space.model_dump(mode="json")
    if data.get("objectives") is None:  # keeps the hashes of studies made before the key existed
        data.pop("objectives", None)
    workload = data.get("workload", {})
    for key, default in (("request_rates", None), ("arrival", "poisson"), ("max_concurrency", None),
                         ("capacity_max_rate", 1000.0), ("capacity_rate_resolution", 0.05),
                         ("measure", "auto"), ("ramp", "stagger")):
        if workload.get(key) == default:  # the same for the open-loop and the steady-level keys
            workload.pop(key, None)
    canonical = json.dumps(data, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _cross_check_space(space: Space) -> list[tuple[KeyPath, str]]:
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


def seed_value_problem(param: "CategoricalParam | IntParam | FloatParam | BoolParam", value: Any) -> str | None:
    """Why a seed's value is not one its parameter can take (None: it is): a seed runs first and
    is the correctness reference, so a typo must stop the space from loading, not the sweep.
    Optuna refuses a categorical value outside the choices (it would crash the trial)."""
    if isinstance(param, CategoricalParam):
        if any(type(value) is type(c) and value == c or _same_number(value, c) for c in param.choices):
            return None
        shown = ", ".join(json.dumps(c) for c in param.choices)
        return f"{value!r} is not one of the choices ({shown})" + did_you_mean(value, param.choices)
    if isinstance(param, BoolParam):
        return None if isinstance(value, bool) else f"expected true or false (got {value!r})"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(param, IntParam) and not float(value).is_integer()):
        return f"expected {'an integer' if isinstance(param, IntParam) else 'a number'} (got {value!r})"
    return None  # a number outside the searched range is allowed: seeds probe failures there (vllm-h200.yaml)


def _same_number(value: Any, choice: Any) -> bool:
    """An int seed for a float choice (8 for 8.0) and back; never a bool for a number."""
    numbers = (int, float)
    return (isinstance(value, numbers) and isinstance(choice, numbers) and not isinstance(value, bool)
            and not isinstance(choice, bool) and value == choice)


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


def gpu_count_of(space: Space, config: dict[str, Any]) -> int | None:
    """GPUs a config needs, from the space's `gpus` expression (None: the space does not say)."""
    if space.gpus is None:
        return None
    return int(parse_expr(space.gpus, space.names).evaluate(dict(config)))
