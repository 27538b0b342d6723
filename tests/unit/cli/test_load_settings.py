"""`sweeper load`'s options into settings (cli/load_settings.py): each refusal, with the message the user
sees, and the plan, capacity search and outputs the options build. Nothing here reads a file or a server."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.cli.load import load
from sweeper.cli.load_settings import load_settings
from sweeper.loadgen.capacity import CapacitySearch
from sweeper.errors import UserError
from sweeper.loadgen.client import StreamOptions

# The command's own defaults, read from its signature: a test's options are what `sweeper load URL` gives.
CLI_DEFAULTS = {name: p.default for name, p in inspect.signature(load).parameters.items()
                if p.default is not inspect.Parameter.empty}
URL = "http://127.0.0.1:9"


def settings(**changes):
    return load_settings(url=URL, **{**CLI_DEFAULTS, **changes})


def refusal(**changes) -> str:
    with pytest.raises(UserError) as caught:
        settings(**changes)
    return str(caught.value)


def test_the_command_passes_every_option_by_its_name():
    assert set(inspect.signature(load_settings).parameters) == set(inspect.signature(load).parameters)


def test_the_defaults_build_the_closed_loop_ladder():
    built = settings()
    plan = built.plan
    assert (built.url, built.model, built.engine, built.capacity) == (URL, None, None, None)
    assert (plan.concurrency, plan.input_len, plan.output_len, plan.requests_per_level, plan.min_rounds) == \
        ((1, 4, 16), 128, 32, 0, 2)
    assert (plan.request_rate, plan.poisson, plan.repeats, plan.seed, plan.precision) == (None, True, 1, 0, None)
    assert plan.options == StreamOptions(api="completions", timeout_s=600.0, stall_timeout_s=None, min_tokens=False,
                                         continuous_usage=True)
    assert (plan.tokenizer, plan.vocab_size, plan.records, plan.probe) == (None, None, (), None)  # read when it runs
    assert (built.as_json, built.json_path, built.tokenizer, built.dataset, built.dataset_format) == \
        (False, None, None, None, None)


def test_options_reach_the_plan_and_its_requests():
    built = settings(concurrency="2,8", api="chat", request_rate=3.5, fixed_rate=True, slo_ttft_ms=200.0,
                     time_scale=10.0, max_client_lag_ms=9.0, precision=0.02, max_seconds=30.0, max_requests=500,
                     timeout=5.0, stall_timeout=2.0, min_tokens=True, continuous_usage=False, model="m",
                     engine="vllm", dataset=Path("d.jsonl"), dataset_format="jsonl", json_path=Path("o.json"),
                     as_json=True)
    plan = built.plan
    assert (plan.concurrency, plan.request_rate, plan.poisson, plan.slo_ttft_ms, plan.time_scale) == \
        ((2, 8), 3.5, False, 200.0, 10.0)
    assert (plan.max_client_lag_ms, plan.precision, plan.max_seconds, plan.max_requests) == (9.0, 0.02, 30.0, 500)
    assert plan.options == StreamOptions(api="chat", timeout_s=5.0, stall_timeout_s=2.0, min_tokens=True,
                                         continuous_usage=False)
    assert (built.model, built.engine, built.dataset, built.dataset_format, built.json_path, built.as_json) == \
        ("m", "vllm", Path("d.jsonl"), "jsonl", Path("o.json"), True)


def test_a_rate_or_precision_of_zero_is_none():
    plan = settings(request_rate=0.0, precision=0.0).plan
    assert (plan.request_rate, plan.precision) == (None, None)


def test_the_settings_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings().url = "elsewhere"  # type: ignore[misc]


@pytest.mark.parametrize("caps", [{"max_seconds": 10.0}, {"max_requests": 100}])
def test_a_precision_cap_needs_precision(caps):
    assert refusal(**caps) == "--max-seconds and --max-requests cap a precision-driven level: give --precision too"
    assert settings(precision=0.05, **caps).plan.precision == 0.05


@pytest.mark.parametrize("levels, message", [
    ("a,b", "--concurrency: expected numbers like 1,4,16, got 'a,b'"),
    ("4,", "--concurrency: expected numbers like 1,4,16, got '4,'"),
    ("0,4", "--concurrency: levels must be >= 1"),
])
def test_levels_must_be_positive_numbers(levels, message):
    assert refusal(concurrency=levels) == message


def test_unknown_names_are_refused():
    assert refusal(api="grpc") == "--api: one of completions, chat, generate, got 'grpc'"
    assert refusal(dataset_format="csv").startswith("--dataset-format: one of sharegpt")
    assert refusal(dataset_format="csv").endswith(", got 'csv'")
    message = refusal(engine="vllm9")
    assert message.startswith("--engine: one of ") and message.endswith(", got 'vllm9'") and "transformers" in message


def test_a_capacity_slo_without_the_search_is_refused():
    for slo in ({"slo_p99_ttft_ms": 100.0}, {"slo_p99_tpot_ms": 20.0}):
        assert refusal(**slo).startswith("--slo-p99-ttft-ms/--slo-p99-tpot-ms are the capacity search's SLO")


def test_the_capacity_search_needs_an_slo_and_a_ceiling_above_its_start():
    assert refusal(find_capacity=True) == \
        "--find-capacity needs an SLO: --slo-p99-ttft-ms MS and/or --slo-p99-tpot-ms MS"
    assert refusal(find_capacity=True, slo_p99_ttft_ms=100.0, request_rate=50.0, max_rate=20.0) == \
        "--max-rate (20) is below the start --rate (50)"


def test_the_concurrency_search_and_its_defaults():
    search = settings(find_capacity=True, slo_p99_ttft_ms=100.0).capacity
    assert search == CapacitySearch(search.slo, rate=False, ceiling=256, resolution=1, cap=0)
    assert (search.slo.p99_ttft_ms, search.slo.p99_tpot_ms) == (100.0, None)
    search = settings(find_capacity=True, slo_p99_tpot_ms=20.0, max_concurrency=64, resolution=4.0).capacity
    assert (search.rate, search.ceiling, search.resolution, search.cap) == (False, 64, 4.0, 0)


def test_the_rate_search_starts_at_the_rate_and_caps_with_max_concurrency():
    search = settings(find_capacity=True, slo_p99_ttft_ms=100.0, request_rate=4.0).capacity
    assert (search.rate, search.ceiling, search.resolution, search.cap) == (True, 1000.0, 0.05, 0)
    search = settings(find_capacity=True, slo_p99_ttft_ms=100.0, request_rate=4.0, max_rate=64.0,
                      max_concurrency=32, resolution=0.1).capacity
    assert (search.rate, search.ceiling, search.resolution, search.cap) == (True, 64.0, 0.1, 32)


def test_the_command_refuses_before_asking_the_server():
    # no --model and nothing listening at URL: the refusal comes first, not a failed /v1/models
    result = CliRunner().invoke(app, ["load", URL, "--engine", "vllm9"])
    assert result.exit_code != 0 and "--engine: one of" in result.output and "v1/models" not in result.output
