"""A run spoiled by the client's own lag is the harness's fault: measured again (fresh prompts),
never the config's; a server's fault (a short reply) is not retried."""

from dataclasses import replace

from sweeper.loadgen.client import LevelRun, RequestSample
from sweeper.loadgen.lag import LagStats
from sweeper.loadgen.ladder import HARNESS_RETRIES, LoadPlan, run_ladder
from sweeper.loadgen.metrics import spoiled_by_client, summarize_level
from tests.support.samples import recorded_vllm_samples


def sample(start: float, tokens: int = 8) -> RequestSample:
    times = [start + 0.01 + 0.003 * i for i in range(tokens)]
    return RequestSample(ok=True, error="", start=start, ttft=0.01, chunk_times=times, chunk_tokens=[1] * tokens,
                         end=times[-1], prompt_tokens=8, output_tokens=tokens, streamed_tokens=tokens,
                         usage_reported=True, requested_output_tokens=8)


def sender(lags: list[float], tokens: int = 8):
    sent = []

    def send(prompts, concurrency, until=None, offsets=None):
        sent.append(prompts)
        lag = lags[min(len(sent) - 1, len(lags) - 1)]
        samples = [sample(0.031 * (i // concurrency), tokens) for i in range(len(prompts))]
        return LevelRun(samples, 0.0, max(s.end for s in samples), LagStats(10, 0.1, lag, lag))
    return send, sent


PLAN = LoadPlan(concurrency=(2,), input_len=8, output_len=8, warmup_rounds=0, min_rounds=2)


def test_a_lagged_run_is_measured_again_and_then_counts():
    send, sent = sender([9.0, 1.0])
    levels, _ = run_ladder(PLAN, send)
    assert levels[2]["valid"] and levels[2]["harness_retries"] == 1
    assert len(sent) == 2 and sent[0] != sent[1]  # fresh prompts: no prefix-cache hits on the retry


def test_a_client_that_always_lags_is_retried_a_bounded_number_of_times():
    send, sent = sender([9.0])
    levels, _ = run_ladder(PLAN, send)
    assert not levels[2]["valid"] and len(sent) == HARNESS_RETRIES + 1
    assert all(r.startswith("client lagged") for r in levels[2]["invalid_reasons"])


def test_a_repeat_the_client_spoiled_after_its_retries_leaves_the_level_the_harnesss_fault():
    """The trial's verdict (trial/pipeline.py): spoiled by the client, an infrastructure fault,
    queued again; never the config's invalid measurement. A combined level's reasons carry a
    "repeat N: " prefix, which once hid the client's reasons from this verdict."""
    send, sent = sender([1.0, 9.0])  # the first repeat measured well, the second always lagged
    levels, _ = run_ladder(replace(PLAN, repeats=2), send)
    level = levels[2]
    assert len(sent) == 1 + HARNESS_RETRIES + 1 and not level["valid"]
    assert all(r.startswith("repeat 2: client lagged") for r in level["invalid_reasons"])
    assert spoiled_by_client(level)

    send, sent = sender([1.0, 9.0], tokens=4)  # short replies too: the server's
    assert not spoiled_by_client(run_ladder(replace(PLAN, repeats=2), send)[0][2])


def test_a_first_round_stall_where_the_client_lagged_is_the_harnesss_fault():
    """vLLM's real one-time stall at C=64 (760 ms against 72-118 ms after it) stays the server's;
    beside a client that lagged, the client's stamps of it cannot be told from its own lateness
    (a busy machine's hiccup read so, and a sweep's only trial failed)."""
    samples = recorded_vllm_samples("defaults_c64_r1")
    span = max(s.end for s in samples) - min(s.start for s in samples)
    alone = summarize_level(samples, 64, span, requested_output_len=64)
    lagged = summarize_level(samples, 64, span, requested_output_len=64, lag=LagStats(100, 0.5, 28.0, 30.0))
    assert [r.startswith("the first round waited") for r in alone["invalid_reasons"]] == [True]
    assert not spoiled_by_client(alone) and spoiled_by_client(lagged)


def test_a_fault_of_the_server_is_not_retried():
    send, sent = sender([9.0], tokens=4)  # short replies, and the client lagged too
    levels, _ = run_ladder(PLAN, send)
    assert not levels[2]["valid"] and len(sent) == 1 and levels[2]["harness_retries"] == 0


def turnaround_sender(gap_s: float, measured: bool = True, lags_ms: tuple[float, ...] = (0.2,),
                      retry_gap_s: float | None = None):
    """Two workers, each waiting gap_s between a request's end and its next send (retry_gap_s on
    the runs after the first, if given); the client's lag p99 of each run in turn (the last repeats)."""
    sent = []

    def send(prompts, concurrency, until=None, offsets=None):
        sent.append(prompts)
        gap_s_now = gap_s if len(sent) == 1 or retry_gap_s is None else retry_gap_s
        lag = lags_ms[min(len(sent) - 1, len(lags_ms) - 1)]
        rounds = len(prompts) // concurrency
        samples, turnarounds = [], []
        for worker in range(concurrency):
            t = 0.0
            for r in range(rounds):
                s = sample(t)
                samples.append(s)
                if r:
                    turnarounds.append(gap_s_now)
                t = s.end + gap_s_now
        return LevelRun(samples, 0.0, max(s.end for s in samples), LagStats(10, 0.1, lag, lag + 0.1),
                        turnarounds_s=turnarounds if measured else None)
    return send, sent


def test_concurrency_lost_to_the_clients_own_turnaround_is_a_harness_fault():
    send, sent = turnaround_sender(0.02)
    levels, _ = run_ladder(replace(PLAN, min_rounds=4), send)
    level = levels[2]
    assert len(sent) == HARNESS_RETRIES + 1 and level["harness_retries"] == HARNESS_RETRIES
    [reason] = level["invalid_reasons"]
    assert reason.startswith("client turnaround: achieved concurrency") and "out of flight" in reason
    assert level["client_turnaround_concurrency"] > 0.4


def test_concurrency_lost_while_the_client_lagged_is_measured_again():
    """Gaps the client's stamps do not show, in a run whose loop lagged: the lag's (a late loop
    sends late), so measured again; the retry's client kept up."""
    send, sent = turnaround_sender(0.02, measured=False, lags_ms=(9.0, 0.2), retry_gap_s=0.0)
    levels, _ = run_ladder(replace(PLAN, min_rounds=4), send)
    assert len(sent) == 2 and levels[2]["harness_retries"] == 1 and levels[2]["valid"]


def test_concurrency_lost_where_the_client_was_not_the_cause_is_the_servers():
    send, sent = turnaround_sender(0.02, measured=False)  # gaps the client's stamps do not show
    levels, _ = run_ladder(replace(PLAN, min_rounds=4), send)
    assert len(sent) == 1 and levels[2]["invalid_reasons"][0].startswith("achieved concurrency")


def test_a_retry_pins_the_client_apart_from_a_local_server(tmp_path):
    import os
    import subprocess

    from sweeper.loadgen.pinning import client_apart

    allowed = os.sched_getaffinity(0)
    server = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        with client_apart(server.pid, min_cores=2) as note:
            if len(allowed) < 2:
                assert note == ""
            else:
                client_core = max(allowed)
                assert os.sched_getaffinity(0) == {client_core}
                assert client_core not in os.sched_getaffinity(server.pid)
                assert f"client pinned to core {client_core}" in note and "server's 1 threads" in note
        assert os.sched_getaffinity(0) == allowed and os.sched_getaffinity(server.pid) == allowed
    finally:
        server.kill()
        server.wait()


def test_on_too_few_cores_nothing_is_pinned(tmp_path):
    """Taking one of 2 or 3 cores from the server changes what is measured (README "The harness's
    own faults"): the retry runs unpinned."""
    import os
    import subprocess

    from sweeper.loadgen.pinning import client_apart

    allowed = os.sched_getaffinity(0)
    server = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        with client_apart(server.pid, min_cores=len(allowed) + 1) as note:
            assert note == "" and os.sched_getaffinity(server.pid) == allowed
            assert os.sched_getaffinity(0) == allowed
    finally:
        server.kill()
        server.wait()
