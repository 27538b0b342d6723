"""Search-space files as typed models: rules, workload, objectives, budget, launch, correctness
check, and the Space that holds them with its parameters (spec/params.py); its fingerprint."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from sweeper.levels import Level, Rate, goal_name, workload_levels
from sweeper.outcomes import CAPACITY_METRIC, MetricName
from sweeper.spec.expr import Expr, parse_expr
from sweeper.spec.loading import Strict
from sweeper.spec.params import BaseParam, DerivedParam, Param, Scalar


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

    def target(self, name: str) -> BaseParam:
        """Where a config value goes (its flag or environment variable)."""
        return self.parameters[name] if name in self.parameters else self.derived[name]

    def parsed_constraints(self) -> list[Expr]:
        return [parse_expr(c, self.names) for c in self.constraints]

    def parsed_rules(self) -> list[tuple[Expr, str]]:
        return [(parse_expr(rule.forbid, self.names), rule.reason) for rule in self.rules]


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


def gpu_count_of(space: Space, config: dict[str, Any]) -> int | None:
    """GPUs a config needs, from the space's `gpus` expression (None: the space does not say)."""
    if space.gpus is None:
        return None
    return int(parse_expr(space.gpus, space.names).evaluate(dict(config)))
