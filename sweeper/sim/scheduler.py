"""Continuous-batching scheduler of the simulated server: one asyncio task, modelled time.

Like SGLang's scheduler loop: new requests are admitted (up to max_running_requests) into a
prefill pass that blocks decoding and emits their first token; then each decode step advances
every running request by one token and takes step_time_ms(batch). Durations are modelled
milliseconds * jitter * time_scale, scheduled on ABSOLUTE deadlines (next = previous deadline +
duration) so event-loop lateness does not accumulate and long runs match the model.

Requests arriving while a prefill pass is still running join that pass (its cost is recomputed
for the combined tokens from the same start). A closed-loop client resends its requests a few
wall milliseconds apart; joining keeps them in one lockstep round, exactly the schedule
`perf.modelled_output_throughput` assumes, instead of splitting each round into many passes.

Turnaround credit: the client's turnaround between a round's last token and its next request
(a few wall ms, spent outside the server) is real time that the time scale does not shrink, so a
client dividing wall time by S would count it 1/S-fold (~2% at S=0.02, C=16). When the server
goes idle and work arrives within TURNAROUND_MAX_S, the surplus gap*(1-S) is credited back by
shortening the next decode steps (each by at most CREDIT_PER_STEP of its duration): round
throughput then matches the model as it would at S=1; TTFT is untouched, the mean ITL of that
round is lower by credit/steps (< 0.5% at S=0.02, C=16).
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from sweeper.sim.config import SimConfig
from sweeper.sim.logs import SimLog
from sweeper.sim.perf import prefill_time_ms, step_time_ms
from sweeper.sim.profiler import SimProfiler

DECODE_LOG_INTERVAL = 40  # steps between "Decode batch." lines, as SGLang's default
# After a stall longer than this (wall s), restart the deadline chain instead of bursting to catch up.
MAX_LAG_S = 0.25
# Idle gaps up to this long (wall s) are client turnaround, not an idle server.
TURNAROUND_MAX_S = 0.05
CREDIT_PER_STEP = 0.25
NCCL_WATCHDOG_S = 600.0  # modelled seconds before torch's NCCL watchdog reports a stuck collective


@dataclass(frozen=True)
class TokenEvent:
    text: str
    finished: bool


@dataclass(eq=False)
class SimRequest:
    input_len: int
    max_tokens: int
    token_text: Callable[[int], str]  # token index -> its text
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    generated: int = 0
    cancelled: bool = False

    @property
    def finished(self) -> bool:
        return self.generated >= self.max_tokens

    def emit_next_token(self) -> None:
        text = self.token_text(self.generated)
        self.generated += 1
        self.events.put_nowait(TokenEvent(text, self.finished))


class Jitter:
    """Multiplicative noise in three parts, as a real server's rate moves (bench/gpu/README.md,
    "Where the variance comes from"): a per-launch speed factor (std `launch_noise`; default half
    of `noise`: what a compile or a core placement fixes for the server's life), a slow factor
    redrawn every `run_steps` steps (std `run_noise`: what moves repeats inside one launch), and
    per-step noise (std `noise`: what averages out inside a level)."""

    def __init__(self, noise: float, seed: int | None, launch_noise: float | None = None,
                 run_noise: float = 0.0, run_steps: int = 200) -> None:
        self._noise, self._run_noise, self._run_steps = noise, run_noise, max(run_steps, 1)
        self._rng = random.Random(seed)
        self.launch_factor = self._clipped(noise / 2.0 if launch_noise is None else launch_noise, limit=2.0)
        self._steps = 0
        self._run_factor = 1.0

    def _clipped(self, std: float, limit: float) -> float:
        if std <= 0:
            return 1.0
        return min(max(self._rng.gauss(1.0, std), 1.0 - limit * std), 1.0 + limit * std)

    def factor(self) -> float:
        if self._steps % self._run_steps == 0:
            self._run_factor = self._clipped(self._run_noise, limit=2.0)
        self._steps += 1
        return self.launch_factor * self._run_factor * self._clipped(self._noise, limit=3.0)


class Scheduler:
    def __init__(self, cfg: SimConfig, time_scale: float, jitter: Jitter, log: SimLog,
                 hang_after_requests: int | None = None) -> None:
        self._cfg = cfg
        # An NCCL hang mid-load: after this many finished requests no step ever completes again.
        self._hang_after = hang_after_requests
        self._finished = 0
        self._scale = time_scale
        self._jitter = jitter
        self._log = log
        self._cap = cfg.effective_max_running
        self._waiting: deque[SimRequest] = deque()
        self._running: list[SimRequest] = []
        self._arrival: asyncio.Future | None = None
        self._credit_s = 0.0  # wall seconds of client turnaround still to give back
        self._steps = 0
        self._tokens_since_log = 0
        self._last_log_at: float | None = None
        self.profiler: SimProfiler | None = None  # set by the server: sees every forward pass

    # ---- called by request handlers ----

    def submit(self, request: SimRequest) -> None:
        self._waiting.append(request)
        if self._arrival is not None and not self._arrival.done():
            self._arrival.set_result(None)

    def load_counts(self) -> dict[str, int]:
        """Live counts, as SGLang reports them in its logs and /get_server_info."""
        return {"#running-req": sum(not r.cancelled for r in self._running),
                "#queue-req": sum(not r.cancelled for r in self._waiting)}

    @staticmethod
    def cancel(request: SimRequest) -> None:
        """Client went away: the request leaves the batch at the next step boundary."""
        request.cancelled = True

    # ---- the loop ----

    def _modelled_seconds(self, ms: float) -> float:
        return ms * self._jitter.factor() * self._scale / 1000.0

    async def _sleep_until(self, deadline: float | None, wake_on_arrival: bool) -> None:
        loop = asyncio.get_running_loop()
        woken = loop.create_future()
        timer = loop.call_at(deadline, lambda: woken.done() or woken.set_result(None)) if deadline is not None else None
        if wake_on_arrival:
            self._arrival = woken
        try:
            await woken
        finally:
            if timer is not None:
                timer.cancel()
            self._arrival = None

    def _admit(self, room: int) -> list[SimRequest]:
        admitted = []
        while self._waiting and len(admitted) < room:
            request = self._waiting.popleft()
            if not request.cancelled:
                admitted.append(request)
        return admitted

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        cursor = loop.time()  # modelled end of the previous pass, in loop time
        while True:
            if self._hang_after is not None and self._finished >= self._hang_after:
                await self._hang()
            self._running = [r for r in self._running if not r.cancelled]
            if not self._running and not any(not r.cancelled for r in self._waiting):
                self._waiting.clear()
                await self._sleep_until(None, wake_on_arrival=True)
                gap = loop.time() - cursor
                self._credit_s = gap * (1.0 - self._scale) if 0.0 < gap <= TURNAROUND_MAX_S else 0.0
                cursor = loop.time()
                continue
            cursor = max(cursor, loop.time() - MAX_LAG_S)
            if self._waiting and len(self._running) < self._cap:
                cursor = await self._prefill_pass(cursor)
            else:
                cursor = await self._decode_step(cursor)

    async def _hang(self) -> None:
        """A collective that never completes: requests stay in flight with no tokens, the HTTP
        server keeps answering; torch's watchdog logs the timeout later (the process stays up)."""
        await asyncio.sleep(NCCL_WATCHDOG_S * self._scale)
        self._log.raw(
            "[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
            f"WorkNCCL(SeqNum={4000 + self._steps}, OpType=ALLREDUCE, NumelIn=7168, NumelOut=7168, "
            f"Timeout(ms)={NCCL_WATCHDOG_S * 1000:.0f}) ran for {NCCL_WATCHDOG_S * 1000 + 12:.0f} "
            "milliseconds before timing out.")
        await asyncio.Event().wait()

    async def _prefill_pass(self, start: float) -> float:
        loop = asyncio.get_running_loop()
        batch = self._admit(self._cap - len(self._running))
        factor = self._jitter.factor()

        def deadline_for(requests: list[SimRequest]) -> float:
            tokens = sum(r.input_len for r in requests)
            return start + prefill_time_ms(self._cfg, tokens) * factor * self._scale / 1000.0

        deadline = deadline_for(batch)
        while loop.time() < deadline:
            await self._sleep_until(deadline, wake_on_arrival=True)
            joined = self._admit(self._cap - len(self._running) - len(batch))
            if joined:
                batch.extend(joined)
                deadline = deadline_for(batch)
        batch = [r for r in batch if not r.cancelled]
        if self.profiler is not None:
            self.profiler.record("prefill", start, deadline, sum(r.input_len for r in batch), len(batch))
        self._log.info(
            f"Prefill batch. #new-seq: {len(batch)}, #new-token: {sum(r.input_len for r in batch)}, "
            f"#cached-token: 0, token usage: 0.00, #running-req: {len(self._running)}, "
            f"#queue-req: {len(self._waiting)}", rank=0)
        for request in batch:
            request.emit_next_token()
            if not request.finished:
                self._running.append(request)
            else:
                self._finished += 1
        self._count_tokens(len(batch), deadline)
        return deadline

    async def _decode_step(self, start: float) -> float:
        batch = len(self._running)
        duration = self._modelled_seconds(step_time_ms(self._cfg, batch))
        credit = min(self._credit_s, duration * CREDIT_PER_STEP)
        self._credit_s -= credit
        deadline = start + duration - credit
        await self._sleep_until(deadline, wake_on_arrival=False)
        if self.profiler is not None:
            self.profiler.record("decode", start, deadline, batch, batch)
        stepped = [r for r in self._running if not r.cancelled]
        for request in stepped:
            request.emit_next_token()
        self._finished += sum(r.finished for r in stepped)
        self._running = [r for r in stepped if not r.finished]
        self._count_tokens(len(stepped), deadline)
        self._steps += 1
        if self._steps % DECODE_LOG_INTERVAL == 0:
            self._log_decode(batch, deadline)
        return deadline

    def _count_tokens(self, tokens: int, at: float) -> None:
        if self._last_log_at is None:
            self._last_log_at = at
        self._tokens_since_log += tokens

    def _log_decode(self, batch: int, at: float) -> None:
        modelled_s = (at - (self._last_log_at or at)) / self._scale
        throughput = self._tokens_since_log / modelled_s if modelled_s > 0 else 0.0
        self._log.info(
            f"Decode batch. #running-req: {batch}, #token: {sum(r.input_len + r.generated for r in self._running)}, "
            f"token usage: 0.00, cuda graph: {self._cfg.uses_cuda_graphs and batch <= self._cfg.effective_cuda_graph_max_bs}, "
            f"gen throughput (token/s): {throughput:.2f}, #queue-req: {len(self._waiting)}", rank=0)
        self._tokens_since_log = 0
        self._last_log_at = at
