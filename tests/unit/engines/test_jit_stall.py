"""A measured level during which vLLM logged a first-use Triton JIT compile is invalid, never
ranked (on the H200 a fused_moe_kernel compile stalled requests ~0.5 s inside a level that still
counted as valid). The lines are the real ones: tests/fixtures/vllm/jit_lines.txt."""

from sweeper.engines.adapter import first_stall_line
from sweeper.engines.vllm import VLLM_INFO
from sweeper.loadgen.client import LevelRun, RequestSample
from sweeper.loadgen.lag import LagStats
from sweeper.loadgen.onhost import LoadPlace
from sweeper.spec.space import Workload
from sweeper.loadgen.endpoints import RequestDialect
from sweeper.trial.load_ladder import LadderRun, build_level_plan, measure_levels
from tests.support.paths import FIXTURE_DIR
from tests.support.samples import recorded_vllm_samples

JIT = (FIXTURE_DIR / "vllm" / "jit_lines.txt").read_text()
HEALTHY = (FIXTURE_DIR / "vllm" / "serve_defaults.log").read_text()


def test_the_real_jit_warning_is_a_stall_line_and_the_activation_notice_is_not():
    activated, slot, moe = JIT.splitlines()
    assert first_stall_line(activated, VLLM_INFO.stall_lines) is None
    assert "fused_moe_kernel" in first_stall_line(moe, VLLM_INFO.stall_lines)
    assert first_stall_line(JIT, ()) is None


def sample(start: float) -> RequestSample:
    times = [start + 0.01 + 0.003 * i for i in range(8)]
    return RequestSample(ok=True, error="", start=start, ttft=0.01, chunk_times=times, chunk_tokens=[1] * 8,
                         end=times[-1], prompt_tokens=8, output_tokens=8, streamed_tokens=8,
                         usage_reported=True, requested_output_tokens=8)


def closed_loop(prompts, output_len, concurrency, options, until=None, offsets=None):
    samples = [sample(0.03 * (i // concurrency)) for i in range(len(prompts))]
    return LevelRun(samples, 0.0, max(s.end for s in samples), LagStats(10, 0.1, 0.2, 0.3))


def test_a_compile_logged_during_the_measured_run_invalidates_that_level_only(tmp_path):
    moe = JIT.splitlines()[2]
    # the log as read after: C=1 warm-up (a compile: what warm-up is for), C=1 run, C=4 warm-up, C=4 run (a compile)
    news = iter([moe, "", "", moe])
    workload = Workload(input_len=8, output_len=8, concurrency=[1, 4], min_rounds=2, warmup_rounds=1)
    levels, failure = measure_levels(LadderRun(build_level_plan(workload, RequestDialect()),
                                               LoadPlace("controller", closed_loop), tmp_path, lambda c, m: None,
                                               lambda: True, new_stall=lambda: next(news)))
    assert failure is None
    assert levels[1]["valid"], levels[1]["invalid_reasons"]
    assert not levels[4]["valid"]
    assert any("stalled on a compile during the measured run" in r and "fused_moe_kernel" in r
               for r in levels[4]["invalid_reasons"])


def test_the_real_first_round_stall_at_c64_invalidates_that_repeat():
    """The defaults seed on the H200, C=64, repeat 1: all 64 first-round requests waited ~760 ms
    for a first token, the rounds after ~72-118 ms; vLLM logged no JIT line for it. Before: valid,
    and its 9,173 tok/s ranked (repeat 2: 13,088)."""
    from sweeper.loadgen.metrics import summarize_level

    def level(name):
        samples = recorded_vllm_samples(name)
        span = max(s.end for s in samples) - min(s.start for s in samples)
        return summarize_level(samples, 64, span, requested_output_len=64)

    stalled = level("defaults_c64_r1")
    assert not stalled["valid"]
    assert any("the first round waited" in r for r in stalled["invalid_reasons"])
    for steady in ("defaults_c64_r2", "winner_c64_r1"):
        assert level(steady)["valid"], level(steady)["invalid_reasons"]


def varied(start: float, prompt_tokens: int, ttft: float) -> RequestSample:
    times = [start + ttft + 0.05 * i for i in range(8)]
    return RequestSample(ok=True, error="", start=start, ttft=ttft, chunk_times=times, chunk_tokens=[1] * 8,
                         end=times[-1], prompt_tokens=prompt_tokens, output_tokens=8, streamed_tokens=8,
                         usage_reported=True, requested_output_tokens=8)


def a_level_of_varied_prompts(first_round_extra_s: float) -> list[RequestSample]:
    """C=4 on an engine that prefills 1 ms a token: the first round's 2,000 tokens sent together,
    one pass, each waits 2 s; later sends, staggered by their varied lengths, prefill alone."""
    prompts = [300, 500, 700, 500]
    wait = sum(prompts) / 1000 + first_round_extra_s
    first = [varied(0.0, p, wait) for p in prompts]
    later = [varied(wait + 0.3 + i, p, p / 1000) for i, p in enumerate([400, 650, 350, 600, 300, 700, 450, 550] * 2)]
    return first + later


def test_a_first_round_of_varied_prompts_prefilled_together_is_no_stall():
    """Before: "the first round waited 2000 ms for its first token against 500 ms after it: a
    one-time stall" (bench/README.md: 9 of 12 ShareGPT trials rejected so)."""
    from sweeper.loadgen.metrics import first_round_stall

    assert first_round_stall(a_level_of_varied_prompts(0.0), 4) is None


def test_a_stall_beyond_the_first_rounds_prefill_is_still_caught_with_varied_prompts():
    from sweeper.loadgen.metrics import first_round_stall

    stall = first_round_stall(a_level_of_varied_prompts(6.0), 4)
    assert stall and "the first round waited 8000 ms" in stall and "per prompt token" in stall
