"""Prompt sources as the level loop builds them (pure: build_prompts), the space keys that ask for
them, the prefix-cache record read from real /metrics text, and the simulator's prefix cache."""

import json
from dataclasses import replace

import pytest

from sweeper.engines import get_engine
from sweeper.errors import ConfigError, UserError
from sweeper.loadgen.client import StreamOptions
from sweeper.spec.datasets import LengthDistribution, PromptRecord
from sweeper.loadgen.endpoints import build_request_body, parse_token_count, request_parts
from sweeper.loadgen.ladder import LoadPlan, build_prompts, length_distribution
from sweeper.loadgen.probe import PrefixCacheApi, cache_fields, parse_metric_totals
from sweeper.sim.prefix_cache import PAGE_TOKENS, PrefixCache
from sweeper.spec.space import LengthSpec
from sweeper.spec.space_file import load_space, parse_space
from tests.support.paths import ROOT

VLLM = ROOT / "tests" / "fixtures" / "vllm"
RECORDS = (PromptRecord(text="Grüße aus Köln:  two spaces\nand a newline", output_len=7),
           PromptRecord(text="Explain KV caches.", output_len=None),
           PromptRecord(messages=({"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}),
                        output_len=3))


def chat_plan(**kw) -> LoadPlan:
    return LoadPlan(output_len=9, options=StreamOptions(api="chat"), **kw)


def test_dataset_prompts_are_sent_verbatim_with_their_own_output_lengths():
    prompts = build_prompts(chat_plan(records=RECORDS), 30, seed=4)
    texts = {r.text: r for r in RECORDS if r.text}
    seen = set()
    for prompt in prompts:
        body = build_request_body("chat", "m", request_parts(prompt)[0], request_parts(prompt)[1], stream=True)
        if body["messages"][0]["role"] == "system":
            assert body["messages"] == list(RECORDS[2].messages) and body["max_tokens"] == 3
        else:
            [message] = body["messages"]
            record = texts[message["content"]]  # byte for byte: no strip, no rewrite
            assert body["max_tokens"] == (record.output_len or 9)  # the level's length where it has none
        seen.add(json.dumps(body["messages"]))
    assert len(seen) == 3


def test_sampling_is_the_same_for_every_config_and_differs_between_levels():
    plan = chat_plan(records=RECORDS, shared_prefix=(32, 2))
    assert build_prompts(plan, 12, seed=5) == build_prompts(replace(plan), 12, seed=5)
    assert build_prompts(plan, 12, seed=5) != build_prompts(plan, 12, seed=6)


def test_shared_prefixes_are_the_same_bytes_within_a_group_on_every_level():
    plan = chat_plan(records=RECORDS[:2], shared_prefix=(40, 3))
    systems = [p["messages"][0]["content"] for seed in (1, 2, 3) for p in build_prompts(plan, 20, seed)]
    assert len(set(systems)) == 3  # three groups, the same three system prompts on every level
    assert all(len(s.split()) == 40 for s in systems)
    completions = LoadPlan(shared_prefix=(16, 2), input_len=8)
    ids = [p["prompt"] for p in build_prompts(completions, 10, seed=1)]
    assert len({tuple(i[:16]) for i in ids}) == 2 and len({tuple(i[16:]) for i in ids}) == 10
    assert all(len(i) == 24 for i in ids)


def test_drawn_lengths_reach_each_request():
    plan = LoadPlan(input_dist=LengthDistribution("uniform", min=4, max=12),
                    output_dist=LengthDistribution("lognormal", mean=20, sigma=0.5, min=2, max=64))
    prompts = build_prompts(plan, 200, seed=3)
    # synthetic text, as the chat path sends: drawn lengths in words (about a token each), no ids
    inputs = [len(p["prompt"].split()) for p in prompts]
    outputs = [p["max_tokens"] for p in prompts]
    assert min(inputs) == 4 and max(inputs) == 12
    assert 2 <= min(outputs) and max(outputs) <= 64 and len(set(outputs)) > 10
    assert 16 < sum(outputs) / len(outputs) < 24


def test_plain_lengths_keep_todays_prompts():
    assert build_prompts(LoadPlan(input_len=5), 3, seed=0) == build_prompts(LoadPlan(input_len=5), 3, seed=0)
    assert all(isinstance(p, list) and len(p) == 5 for p in build_prompts(LoadPlan(input_len=5), 3, seed=0))


def test_chat_messages_on_a_completions_server_are_refused_before_any_request():
    with pytest.raises(UserError, match="need the chat api"):
        build_prompts(LoadPlan(records=RECORDS[2:]), 2, seed=0)


SPACE = """\
name: s
engine: sim
model: m
parameters:
  tp: {type: categorical, choices: [4, 8], flag: --tp}
workload:
  dataset: data/prompts.jsonl
  input_len: {dist: lognormal, mean: 200, sigma: 0.5, min: 16, max: 2048}
  output_len: 64
  shared_prefix: {tokens: 512, groups: 4}
"""


def test_the_space_keys_and_a_dataset_path_from_the_space_files_folder(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "prompts.jsonl").write_text('{"prompt": "hello", "output_len": 4}\n')
    (tmp_path / "space.yaml").write_text(SPACE)
    workload = load_space(tmp_path / "space.yaml").workload
    assert workload.dataset == str(tmp_path / "data" / "prompts.jsonl")
    assert workload.input_len == LengthSpec(dist="lognormal", mean=200, sigma=0.5, min=16, max=2048)
    assert workload.typical_input_len == 200 and workload.output_len == 64
    assert (workload.shared_prefix.tokens, workload.shared_prefix.groups) == (512, 4)
    assert length_distribution(workload.input_len) == LengthDistribution("lognormal", 200, 0, 16, 2048, 0.5)


@pytest.mark.parametrize("text, record", [
    ('{"prompt": "ok"}\n{"prompt": "broken\n', "prompts.jsonl:2: not valid JSON"),
    ('{"prompt": "ok"}\n{"prompt": "x", "output_len": 0}\n', "prompts.jsonl:2: output_len must be"),
    ('{"text": "no prompt key"}\n', "prompts.jsonl:1: expected \"prompt\""),
])
def test_a_malformed_dataset_is_one_line_naming_file_and_record_when_the_space_loads(tmp_path, text, record):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "prompts.jsonl").write_text(text)
    (tmp_path / "space.yaml").write_text(SPACE)
    with pytest.raises(ConfigError) as caught:
        load_space(tmp_path / "space.yaml")
    message = str(caught.value)
    assert "\n" not in message and record in message
    assert message.startswith(f"{tmp_path / 'space.yaml'}:7: workload.dataset: ")


def test_workload_dataset_format_is_read_and_a_wrong_one_is_one_line(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "prompts.jsonl").write_text('{"prompt": "hello", "output_len": 4}\n')
    (tmp_path / "space.yaml").write_text(SPACE.replace("  dataset: data/prompts.jsonl\n",
                                                       "  dataset: data/prompts.jsonl\n  dataset_format: jsonl\n"))
    assert load_space(tmp_path / "space.yaml").workload.dataset_format == "jsonl"
    (tmp_path / "space.yaml").write_text(SPACE.replace("  dataset: data/prompts.jsonl\n",
                                                       "  dataset: data/prompts.jsonl\n  dataset_format: sharegpt\n"))
    with pytest.raises(ConfigError) as caught:
        load_space(tmp_path / "space.yaml")
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{tmp_path / 'space.yaml'}:7: workload.dataset: ")
    assert "prompts.jsonl: a ShareGPT file is a JSON array" in message and "looks like jsonl" in message


def test_a_missing_dataset_is_refused_when_the_space_loads(tmp_path):
    (tmp_path / "space.yaml").write_text(SPACE)
    with pytest.raises(ConfigError, match="prompts.jsonl: dataset file not found"):
        load_space(tmp_path / "space.yaml")


@pytest.mark.parametrize("length, message", [
    ("{dist: uniform, min: 4}", "a uniform length needs min and max"),
    ("{dist: lognormal, mean: 100}", "needs std"),
    ("{dist: normal, mean: 100, std: 5, min: 50, max: 10}", "max (10) must be >= min (50)"),
    ("{dist: normal, mean: 100, sigma: 1}", "sigma is for dist: lognormal"),
])
def test_length_distributions_are_checked(length, message):
    text = SPACE.replace("  dataset: data/prompts.jsonl\n", "").replace(
        "{dist: lognormal, mean: 200, sigma: 0.5, min: 16, max: 2048}", length)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_space(text, "s.yaml")


def test_native_load_refuses_custom_prompts():
    text = SPACE.replace("  dataset: data/prompts.jsonl\n", "  load: native\n")
    with pytest.raises(ConfigError, match="load: native runs the engine's own random prompts"):
        parse_space(text, "s.yaml")


def test_the_hit_rate_from_vllms_real_metrics_around_a_run():
    before = parse_metric_totals((VLLM / "metrics_before.txt").read_text())
    after = parse_metric_totals((VLLM / "metrics_after_vllm_bench.txt").read_text())
    api = get_engine("vllm").info.prefix_cache
    fields = cache_fields(api, before, after)
    assert fields["prefix_cache_hit_tokens"] == 1600.0 - 64.0
    assert fields["prefix_cache_query_tokens"] == 11283.0 - 9235.0
    assert fields["prefix_cache_hit_rate"] == pytest.approx(1536 / 2048)
    assert cache_fields(api, None, None)["prefix_cache_hit_rate"] is None


def test_sglangs_gauge_where_no_counters_are_read():
    text = ('# HELP sglang:cache_hit_rate The cache hit rate\n# TYPE sglang:cache_hit_rate gauge\n'
            'sglang:cache_hit_rate{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.007507552643049313\n')
    api = PrefixCacheApi(hit_rate_gauge="sglang:cache_hit_rate", hits_counter="sglang:cached_tokens",
                         queries_counter="sglang:prompt_tokens")
    assert cache_fields(api, {}, parse_metric_totals(text))["prefix_cache_hit_rate"] == pytest.approx(0.0075075526)


def test_vllms_real_tokenize_answer():
    status, body = json.loads((VLLM / "tokenize.json").read_text())[0]
    assert status == 200 and parse_token_count(json.loads(body)) == 3
    assert parse_token_count({"tokens": [1, 2]}) == 2  # llama-server answers tokens only


def test_each_engine_declares_its_cache_and_tokenizer_endpoints():
    assert get_engine("sglang").info.prefix_cache.flush_path == "/flush_cache"
    assert get_engine("vllm").info.prefix_cache.flush_path == "/reset_prefix_cache"
    assert get_engine("llamacpp").info.prefix_cache.flush_path is None
    assert get_engine("llamacpp").info.tokenize.text_field == "content"
    assert get_engine("sim").info.prefix_cache == get_engine("sglang").info.prefix_cache


def test_the_simulators_prefix_cache_hits_whole_pages_of_a_shared_prefix():
    cache = PrefixCache()
    shared = [f"s{i}" for i in range(2 * PAGE_TOKENS)]
    assert cache.admit(shared + ["a"] * 20) == 0
    assert cache.admit(shared + ["b"] * 20) == 2 * PAGE_TOKENS  # the prefix's two pages
    assert cache.admit(["x"] + shared) == 0  # a prefix match only, from the first token
    assert (cache.prompt_tokens, cache.cached_tokens) == (52 + 52 + 33, 32)
    cache.flush()
    assert cache.admit(shared) == 0 and cache.hit_rate == 0.0
    off = PrefixCache(enabled=False)
    off.admit(shared)
    assert off.admit(shared) == 0


def closed_loop(lengths: list[float], concurrency: int) -> list:
    """Samples of a closed loop over requests of these durations: each worker sends its next
    request the moment its last one ends."""
    from tests.support.samples import make_sample

    free = [0.0] * concurrency
    samples = []
    for length in lengths:
        worker = min(range(concurrency), key=free.__getitem__)
        start = free[worker]
        free[worker] = start + length
        samples.append(make_sample(start, [start + length / 2, start + length]))
    return samples


def test_varied_lengths_judge_the_concurrency_while_requests_are_sent():
    from sweeper.loadgen.metrics import concurrency_while_sending, summarize_level

    samples = closed_loop([0.1, 0.1, 0.1, 2.0, 0.1, 0.1, 0.1, 0.1], concurrency=2)  # one long request
    duration = max(s.end for s in samples) - min(s.start for s in samples)
    plain = summarize_level(samples, 2, duration)
    assert plain["concurrency"] < 1.9 and not plain["valid"]  # the drain behind the long one
    assert concurrency_while_sending(samples) == pytest.approx(2.0)
    assert summarize_level(samples, 2, duration, varied_lengths=True)["valid"]
    starved = closed_loop([0.1] * 8, concurrency=1)  # a client that kept 1 of 2 in flight
    assert not summarize_level(starved, 2, 0.8, varied_lengths=True)["valid"]


def test_chat_messages_for_an_engine_sent_completions_are_refused_when_the_space_loads(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "prompts.jsonl").write_text(
        '{"prompt": "fine"}\n{"messages": [{"role": "user", "content": "hi"}]}\n')
    (tmp_path / "space.yaml").write_text(SPACE)
    with pytest.raises(ConfigError, match=r"record 2 has chat \"messages\", but sim is sent completions"):
        load_space(tmp_path / "space.yaml")


def test_a_study_reads_its_stored_space_with_the_dataset_from_the_space_files_folder(tmp_path):
    from sweeper.study.stored import parse_stored_space

    attrs = {"space_text": SPACE, "space_path": str(tmp_path / "spaces" / "space.yaml")}
    assert parse_stored_space(attrs).workload.dataset == str(tmp_path / "spaces" / "data" / "prompts.jsonl")


def test_what_a_plan_sends_text_or_token_ids():
    """Token ids only where the length must be exact without a tokenizer: one fixed input_len on a
    completions server (with or without shared prefixes); drawn lengths go as synthetic text."""
    assert not LoadPlan(input_len=5).sends_text and not LoadPlan(shared_prefix=(8, 2)).sends_text
    drawn = LoadPlan(input_dist=LengthDistribution("uniform", min=4, max=12), shared_prefix=(8, 2))
    assert drawn.sends_text
    [prompt] = build_prompts(drawn, 1, seed=0)
    assert isinstance(prompt["prompt"], str)  # the shared prefix too: text before the text
    assert LoadPlan(options=StreamOptions(api="chat")).sends_text and LoadPlan(text_prompts=True).sends_text
