"""The level loop, once: for each level (a concurrency, or an open-loop request rate) a warmup
(not measured), then `repeats` measured runs with fresh prompts (no prefix-cache hits), the median
repeat kept with the repeats' CV. With a `precision`, each closed-loop run has no warm-up run and no fixed size: it sends until
its steady-state CI is narrow enough or a cap is hit (precision.py). The sweep (trial/load_ladder.py)
and `sweeper load` (standalone.py: a server already up; launches nothing) both run it; what differs between them (sample files, the watchdog, judging a level) comes in as hooks.
"""

from __future__ import annotations

import itertools
import logging
import math
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from sweeper.errors import UserError
from sweeper.loadgen.client import LevelRun, StreamOptions
from sweeper.spec.datasets import LengthDistribution, PromptRecord, draw_lengths, load_dataset, sample_records
from sweeper.loadgen.endpoints import Prompt
from sweeper.loadgen.metrics import (MAX_CLIENT_LAG_P99_MS, achieved_arrival_rate, combine_repeats, latency_fields,
                                     spoiled_by_client, summarize_level)
from sweeper.loadgen.pinning import client_apart
from sweeper.loadgen.precision import PrecisionStop, estimate_of_run, ramp_end
from sweeper.loadgen.probe import LevelProbe, cache_fields, flush_refused_note, token_count_fields
from sweeper.loadgen.vocab import DEFAULT_VOCAB_SIZE
from sweeper.loadgen.workload import (arrival_offsets_s, build_prompt_texts, build_prompt_token_ids,
                                      build_shared_prefixes, pick_groups)
from sweeper.levels import Level, Rate, level_seed
from sweeper.outcomes import LevelMetrics
from sweeper.spec.space import DEFAULT_MAX_SECONDS, LengthSpec, Workload

log = logging.getLogger(__name__)

HARNESS_RETRIES = 2  # measurements again of a run the client's own lag or turnaround spoiled (then it counts)

@dataclass(frozen=True)
class LoadPlan:
    concurrency: tuple[int, ...] = (1, 4, 16)
    input_len: int = 128
    output_len: int = 32
    requests_per_level: int = 0
    min_rounds: int = 2
    warmup_rounds: int = 1
    repeats: int = 1
    seed: int = 0
    request_rate: float | None = None  # open loop at this rate; the levels are then caps
    poisson: bool = True
    # a sweep's open-loop ladder (workload.request_rates): one level per rate, each capped at
    # rate_cap requests in flight (0: no cap); `concurrency` is then not the ladder
    rates: tuple[float, ...] = ()
    rate_cap: int = 0
    rate_seconds: float = 5.0  # an open-loop level sends at least rate x this many requests
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    max_client_lag_ms: float = MAX_CLIENT_LAG_P99_MS
    time_scale: float = 1.0
    tokenizer: Any | None = None  # text prompts of exact length (workload.tokenizer_from_file)
    vocab_size: int | None = None  # token-id prompts stay below it (loadgen/vocab.py); None: 32000
    text_prompts: bool = False  # text even for completions (a server that takes no token ids)
    options: StreamOptions = field(default_factory=StreamOptions)
    # prompt sources (docs/measurement.md "Prompt sources and shared prefixes"): dataset records sent verbatim,
    # lengths drawn per request, shared system prompts (tokens, groups); the server's side
    records: tuple[PromptRecord, ...] = ()
    input_dist: LengthDistribution | None = None
    output_dist: LengthDistribution | None = None
    shared_prefix: tuple[int, int] | None = None
    probe: LevelProbe | None = None  # cache flush and hit rate, prompt token counts
    precision: float | None = None  # relative CI half-width a closed-loop run sends until
    max_seconds: float | None = None  # its caps (modelled s; DEFAULT_MAX_SECONDS when both unset)
    max_requests: int | None = None
    # a precise run's first C requests ask for staggered lengths (precision.py "Ramp-up"); False:
    # all C start alike (a burst), as vllm bench serve's closed loop does
    stagger: bool = True

    @classmethod
    def from_workload(cls, workload: Workload, options: StreamOptions, time_scale: float = 1.0,
                      text_prompts: bool = False, vocab_size: int | None = None,
                      probe: LevelProbe | None = None) -> "LoadPlan":
        """A space's workload as a plan, sent with `options` (the dataset read here)."""
        tokenizer = probe.tokenizer if probe is not None else None
        return cls(concurrency=tuple(workload.concurrency), rates=tuple(workload.request_rates or ()),
                   poisson=workload.arrival == "poisson", rate_cap=workload.max_concurrency or 0,
                   input_len=workload.typical_input_len,
                   output_len=workload.typical_output_len, requests_per_level=workload.requests_per_level,
                   min_rounds=workload.min_rounds, warmup_rounds=workload.warmup_rounds,
                   repeats=workload.repeats, seed=workload.seed, slo_ttft_ms=workload.slo_ttft_ms,
                   slo_tpot_ms=workload.slo_tpot_ms, max_client_lag_ms=workload.max_client_lag_ms,
                   time_scale=time_scale, text_prompts=text_prompts, vocab_size=vocab_size, options=options,
                   tokenizer=tokenizer,
                   records=load_records(workload.dataset, workload.dataset_format, tokenizer),
                   input_dist=length_distribution(workload.input_len),
                   output_dist=length_distribution(workload.output_len),
                   shared_prefix=(workload.shared_prefix.tokens, workload.shared_prefix.groups)
                   if workload.shared_prefix else None, probe=probe,
                   precision=workload.level_precision, max_seconds=workload.max_seconds,
                   max_requests=workload.max_requests, stagger=workload.ramp == "stagger")

    @property
    def levels(self) -> tuple[Level, ...]:
        """The ladder: one open-loop level per rate when the plan has rates, else the concurrencies."""
        return tuple(Rate(r) for r in self.rates) if self.rates else self.concurrency

    def at_level(self, level: Level) -> tuple["LoadPlan", int]:
        """The plan one level runs with and the concurrency it sends at: a rate level is an open
        loop at that rate, capped at rate_cap in flight (0: none); a concurrency level is itself."""
        if isinstance(level, Rate):
            return replace(self, request_rate=float(level)), self.rate_cap
        return self, level

    def arrival_offsets(self, n: int) -> list[float] | None:
        """An open loop's send times in wall seconds (the rate is per modelled second, so the
        offsets shrink with a simulator's time scale); None for a closed loop. Seeded by the
        workload's seed alone: every config of a study gets the same arrivals."""
        if self.request_rate is None:
            return None
        offsets = arrival_offsets_s(n, self.request_rate, poisson=self.poisson, seed=self.seed)
        return [offset * self.time_scale for offset in offsets]

    @property
    def sends_text(self) -> bool:
        """Text prompts: for chat, a server that takes only text, with a tokenizer (exact lengths
        then), from a dataset, or of drawn lengths (synthetic text: common words of about one token
        each, as the chat path sends); else token ids of exactly input_len."""
        return self.options.api == "chat" or self.text_prompts or self.tokenizer is not None \
            or bool(self.records) or self.input_dist is not None

    @property
    def custom_prompts(self) -> bool:
        """Prompts beyond one fixed length of random ids or words (per-request dicts)."""
        return bool(self.records) or self.input_dist is not None or self.output_dist is not None \
            or self.shared_prefix is not None

    def requests_at(self, concurrency: int) -> int:
        """Requests of one measured run: min_rounds rounds of C (a closed loop), or rate x
        rate_seconds arrivals (open loop; C, when not 0, is then only a cap)."""
        if self.request_rate is not None:
            return max(self.requests_per_level, math.ceil(self.request_rate * self.rate_seconds), 2)
        return max(self.requests_per_level, self.min_rounds * concurrency)

    def warmup_requests(self, concurrency: int) -> int:
        """warmup_rounds rounds of C, or of a second's arrivals at the rate (open loop)."""
        if self.request_rate is not None:
            return self.warmup_rounds * max(concurrency, math.ceil(self.request_rate))
        return self.warmup_rounds * concurrency

    @property
    def precise(self) -> bool:
        """Runs driven by precision: closed loop with a precision (an open loop's pace is its rate)."""
        return self.precision is not None and self.request_rate is None

    def stop_rule(self, concurrency: int) -> PrecisionStop:
        max_seconds = self.max_seconds
        if max_seconds is None and self.max_requests is None:
            max_seconds = DEFAULT_MAX_SECONDS
        return PrecisionStop(self.precision, concurrency, max_seconds, self.max_requests, self.time_scale)


@dataclass
class RecordDraw:
    """Where a level's runs take their dataset records: one seeded order of the dataset for the
    level, read on from run to run (warm-up, measured runs, repeats, retries), so no record
    comes twice within a level until the level has sent every one."""

    seed: int
    used: int = 0

    def take(self, n: int) -> tuple[int, int]:
        """(order seed, position) of the next n records (build_prompts' records_at)."""
        at, self.used = (self.seed, self.used), self.used + n
        return at


def records_reused(plan: LoadPlan, draw: RecordDraw) -> int | None:
    """Requests of a level beyond the dataset's size (each repeated a record); None without one."""
    return max(0, draw.used - len(plan.records)) if plan.records else None


def reuse_note(records: int, sent: int) -> str:
    return (f"the dataset has {records} records and this level sent {sent} requests (warm-up included): "
            f"{sent - records} repeated a record, so prefix-cache hits may be inflated")


@dataclass(frozen=True)
class Stop:
    """A hook's word that the ladder ends with `verdict` (handed back to the caller); with
    keep_level, the level's runs so far are still summarized and kept."""

    verdict: Any
    keep_level: bool = False


class LadderHooks:
    """What a caller adds to the loop, told the level (a concurrency, or a Rate); these defaults
    add nothing."""

    def warmup_done(self, level: Level, run: LevelRun) -> Stop | None:
        return None

    def run_done(self, level: Level, repeat: int, run: LevelRun) -> Stop | None:
        return None

    def run_notes(self, level: Level) -> list[str]:
        """Reasons the run just summarised cannot be trusted that only the caller sees (a compile
        stall in the server's log): each makes that run invalid."""
        return []

    def level_fields(self, level: Level, metrics: LevelMetrics) -> dict[str, Any]:
        """Keys added to each level's metrics (which it may read)."""
        return {}

    def level_done(self, level: Level, metrics: LevelMetrics) -> Stop | None:
        return None

    def server_pgid(self) -> int | None:
        """The server's process group where it runs on this machine (pinned apart from the
        client on a harness retry), else None."""
        return None


# (prompts, concurrency, until, offsets) -> the run; `until` (precision.PrecisionStop or None)
# ends a closed loop early, and the prompts are then an iterator as long as the cap (endless
# without one); `offsets` (wall s, LoadPlan.arrival_offsets): an open loop sending prompt i at
# offsets[i], at most `concurrency` in flight (0: no cap); None: a closed loop at `concurrency`
Send = Callable[..., LevelRun]


def run_ladder(plan: LoadPlan, send: Send, hooks: LadderHooks = LadderHooks()
               ) -> tuple[dict[Level, LevelMetrics], Any | None]:
    """Each level of the plan in turn (LoadPlan.levels: concurrencies, or rates): (levels
    measured, keyed by level, the verdict of the hook that stopped the ladder or None). Hooks
    are told the level."""
    levels: dict[Level, LevelMetrics] = {}
    probe = plan.probe
    flush_told = False
    for level in plan.levels:
        at, concurrency = plan.at_level(level)
        # each level starts with an empty prefix cache: no level is helped by the one before it
        flushed = probe.flush() if probe is not None else None
        # a precise run finds and drops its own warm-up (MSER-5): no warm-up run; a rate level
        # warms up on warmup_rounds seconds of its arrivals, whatever its cap
        warm_at = 0 if isinstance(level, Rate) else concurrency
        draw = RecordDraw(at.seed + level_seed(level))
        n_warm = 0 if at.precise else at.warmup_requests(warm_at)
        warmup = build_prompts(at, n_warm, at.seed + 10_000 + level_seed(level), draw.take(n_warm)) if n_warm else []
        if warmup and (stop := hooks.warmup_done(level, send(warmup, concurrency, None,
                                                             offsets=at.arrival_offsets(len(warmup))))):
            return levels, stop.verdict
        summaries, stop = [], None
        counters = probe.cache_counters() if probe is not None else None
        for repeat in range(at.repeats):
            summary, stop = measured_run(at, send, hooks, level, repeat, concurrency, draw)
            if stop and not stop.keep_level:
                return levels, stop.verdict
            summaries.append(summary)
            if stop:
                break
        metrics = combine_repeats(summaries)
        reused = records_reused(at, draw)
        notes = [reuse_note(len(at.records), draw.used)] if reused else []
        if flushed is False and not flush_told:  # said once: every level of this server is refused alike
            notes.append(flush_refused_note(probe.cache))
            flush_told = True
        for note in notes:
            log.warning(note)
        metrics.update(prompts_sent_as="text" if at.sends_text else "token ids", dataset_records_reused=reused,
                       level_notes=notes)
        if probe is not None:
            metrics.update(cache_flushed=flushed, **cache_fields(probe.cache, counters, probe.cache_counters()))
        metrics.update(hooks.level_fields(level, metrics))
        levels[level] = metrics
        if stop := stop or hooks.level_done(level, metrics):
            return levels, stop.verdict
    return levels, None


def measured_run(plan: LoadPlan, send: Send, hooks: LadderHooks, level: Level, repeat: int,
                 concurrency: int | None = None, draw: RecordDraw | None = None
                 ) -> tuple[LevelMetrics | None, Stop | None]:
    """One measured run's metrics (and the hook's stop, if any). A run spoiled by the harness
    alone (the client's lag or turnaround, metrics.spoiled_by_client) is an infrastructure fault:
    measured again with fresh prompts and the client on a core apart from the server where the
    host allows (pinning.py), up to HARNESS_RETRIES times (`harness_retries` says how often; after
    that it counts as measured, and the reasons stay on the level). `concurrency`: what the
    level sends at (default the level itself; a rate level's cap). draw: where the level's dataset
    records come from (default a fresh order per run)."""
    concurrency = level if concurrency is None else concurrency
    pinned = ""
    for attempt in range(HARNESS_RETRIES + 1):
        seed = plan.seed + level_seed(level) + 100_000 * repeat + 1_000_000 * attempt
        with client_apart(hooks.server_pgid()) if attempt else nullcontext("") as pinned:
            until = plan.stop_rule(concurrency) if plan.precise else None
            prompts = _run_prompts(plan, concurrency, seed, draw)
            # a precise run's prompts are a stream made as it goes: not counted ahead
            counted = plan.probe.count_prompt_tokens(prompts) if plan.probe is not None and not plan.precise else None
            offsets = plan.arrival_offsets(len(prompts)) if plan.request_rate is not None else None
            run = send(prompts, concurrency, until, offsets=offsets)
        stop = hooks.run_done(level, repeat, run)
        if stop and not stop.keep_level:
            return None, stop
        summary = summarize_run(plan, concurrency, run, until)
        summary.update(token_count_fields(plan.probe, counted))
        if notes := hooks.run_notes(level):
            summary["invalid_reasons"], summary["valid"] = [*summary["invalid_reasons"], *notes], False
        if stop or not spoiled_by_client(summary):
            break
    summary["harness_retries"] = attempt
    summary["client_pinned"] = pinned or None
    return summary, stop


def _run_prompts(plan: LoadPlan, concurrency: int, seed: int, draw: RecordDraw | None = None):
    """A fixed run's prompts, or a precise run's: fresh ones made a few rounds at a time (each
    batch its own seed), as many as max_requests or endless. Dataset records from `draw`."""
    def made(n: int, seed: int) -> list[Prompt]:
        return build_prompts(plan, n, seed, draw.take(n) if draw is not None else None)

    if not plan.precise:
        return made(plan.requests_at(concurrency), seed)
    chunk = 4 * concurrency
    stream = itertools.chain.from_iterable(made(chunk, seed + 7919 * i) for i in itertools.count())
    if plan.stagger:
        stream = itertools.chain(staggered(plan, list(itertools.islice(stream, concurrency))), stream)
    return stream if plan.max_requests is None else itertools.islice(stream, plan.max_requests)


def staggered(plan: LoadPlan, prompts: list[Prompt]) -> list[dict]:
    """A closed loop's first requests (one per worker) with lengths spread evenly below their own:
    request i of n asks for (i+1)/n of it, so the workers' next requests start one by one rather
    than all at once (precision.py "Ramp-up")."""
    n = len(prompts)
    out = []
    for i, prompt in enumerate(prompts):
        body = dict(prompt) if isinstance(prompt, dict) else {"prompt": prompt}
        full = body.get("max_tokens") or plan.output_len
        out.append({**body, "max_tokens": max(1, round(full * (i + 1) / n))})
    return out


def summarize_run(plan: LoadPlan, concurrency: int, run: LevelRun, until: PrecisionStop | None = None
                  ) -> LevelMetrics:
    """One measured run's metrics; an open-loop run has no target concurrency, and records the
    arrival rate it achieved. A precise run's output_throughput is its steady-state batch-means
    value, with the CI keys beside it."""
    summary = summarize_level(run.samples, concurrency if plan.request_rate is None else None, run.duration_s,
                              time_scale=plan.time_scale, requested_output_len=None, lag=run.lag,
                              slo_ttft_ms=plan.slo_ttft_ms, slo_tpot_ms=plan.slo_tpot_ms,
                              max_client_lag_ms=plan.max_client_lag_ms, varied_lengths=plan.custom_prompts,
                              turnarounds_s=run.turnarounds_s, first_round_check=not plan.precise)
    if plan.request_rate is not None:
        summary["achieved_request_rate"] = achieved_arrival_rate(run.samples, plan.time_scale)
    if until is not None:
        summary.update(precision_fields(plan, run, until))
    return summary


def precision_fields(plan: LoadPlan, run: LevelRun, until: PrecisionStop) -> dict[str, Any]:
    """The keys of a precise run (agreed with the CI-aware leaderboard: keep the names)."""
    # stopped for precision: the estimate it judged (the data after it, to the stop, changes the
    # truncation and batches a little and could tip a borderline level either way)
    estimate = until.estimate if until.reason == "precision" and until.estimate else None
    stopped = run.stopped_at if run.stopped_at is not None else run.end
    ramped = until.ramp_end or ramp_end(run.samples, until.concurrency) or run.start
    if estimate is None:
        estimate = estimate_of_run(run.samples, ramped, stopped, plan.time_scale)
    reached = estimate.precise(plan.precision or 0.0)
    fields: dict[str, Any] = {
        "output_throughput_ci_low": estimate.ci_low,
        "output_throughput_ci_high": estimate.ci_high,
        "batches": estimate.batches,
        "precision_reached": reached,
        "precision": plan.precision,
        "precision_half_width": estimate.relative_half_width,
        "warmup_dropped_s": estimate.warmup_dropped_s,
        # the parts of the run left out of the window, in modelled s: the first C requests, the
        # requests in flight after the stop
        "ramp_s": (ramped - run.start) / plan.time_scale,
        "drain_s": (run.end - stopped) / plan.time_scale,
        "window_s": estimate.window_s,
        "stopped_by": until.reason or "prompts",
    }
    if estimate.batches:
        fields["output_throughput"] = estimate.value
        # the latencies of the same steady state: requests sent after the warm-up MSER dropped
        cut = ramped + estimate.warmup_dropped_s * plan.time_scale
        if steady := [s for s in run.samples if s.ok and s.start >= cut]:
            fields.update(latency_fields(steady, plan.time_scale), steady_requests=len(steady))
    if not reached:
        fields["precision_note"] = (
            f"imprecise: 95% CI half-width {estimate.relative_half_width:.1%} over {estimate.batches} batches, "
            f"not within {plan.precision:.1%} (stopped by {until.reason or 'prompts'})")
    return fields


def build_prompts(plan: LoadPlan, n: int, seed: int, records_at: tuple[int, int] | None = None) -> list[Prompt]:
    """Token ids or text (LoadPlan.sends_text). With custom prompts (a dataset, drawn lengths,
    shared prefixes) each is a dict with its own max_tokens (endpoints.Prompt). Seeded: the same
    plan, n and seed give the same prompts. records_at: (order seed, position) of the dataset's
    records to take (RecordDraw); default the seed's order from its start."""
    as_text = plan.sends_text
    lengths = draw_lengths(plan.input_dist, n, seed + 1) if plan.input_dist else plan.input_len
    if plan.records:
        picked = sample_records(plan.records, n, *(records_at or (seed, 0)))
        bodies: list = [list(r.messages) if r.messages else r.text for r in picked]
        own_lens: list[int | None] = [r.output_len for r in picked]
    else:
        bodies = (build_prompt_texts(n, lengths, seed, tokenizer=plan.tokenizer) if as_text
                  else build_prompt_token_ids(n, lengths, seed, plan.vocab_size or DEFAULT_VOCAB_SIZE))
        own_lens = [None] * n
    if not plan.custom_prompts:
        return bodies
    drawn = draw_lengths(plan.output_dist, n, seed + 2) if plan.output_dist else [plan.output_len] * n
    max_tokens = [own or out for own, out in zip(own_lens, drawn)]
    if plan.shared_prefix is None:
        return [_request(plan, body, None, tokens) for body, tokens in zip(bodies, max_tokens)]
    size, groups = plan.shared_prefix
    prefixes = build_shared_prefixes(groups, size, plan.seed, as_text=as_text,
                                     vocab_size=plan.vocab_size or DEFAULT_VOCAB_SIZE, tokenizer=plan.tokenizer)
    picks = pick_groups(n, groups, seed)
    return [_request(plan, body, prefixes[g], tokens) for body, g, tokens in zip(bodies, picks, max_tokens)]


def _request(plan: LoadPlan, body: str | list, prefix: str | list[int] | None, max_tokens: int) -> dict:
    """One request's prompt dict: the body verbatim, after its shared prefix (a system message
    for chat; text or ids put in front for a completion)."""
    is_messages = isinstance(body, list) and bool(body) and isinstance(body[0], dict)
    if is_messages and plan.options.api != "chat":
        raise UserError("dataset records with chat \"messages\" need the chat api (--api chat, or an "
                        "engine served on /v1/chat/completions); completions take \"prompt\" records")
    if plan.options.api == "chat":
        messages = body if is_messages else [{"role": "user", "content": body}]
        if prefix is not None:
            messages = [{"role": "system", "content": prefix}, *messages]
        return {"messages": messages, "max_tokens": max_tokens}
    if prefix is None:
        return {"prompt": body, "max_tokens": max_tokens}
    return {"prompt": prefix + body if isinstance(body, list) else f"{prefix}\n\n{body}", "max_tokens": max_tokens}


def length_distribution(value: int | LengthSpec) -> LengthDistribution | None:
    """A workload length as drawn lengths; None for a plain number (today's fixed length)."""
    if isinstance(value, int):
        return None
    mean = value.mean if value.mean is not None else value.typical
    return LengthDistribution(kind=value.dist, mean=mean, std=value.std, min=value.min, max=value.max,
                              sigma=value.sigma)


def load_records(path: str | None, fmt: str | None, tokenizer: Any | None = None) -> tuple[PromptRecord, ...]:
    """A dataset's records (none without a path); a ShareGPT reply is measured with the tokenizer
    when there is one, else in words."""
    if path is None:
        return ()
    count = (lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)) if tokenizer else None
    return tuple(load_dataset(Path(path), fmt, count))
