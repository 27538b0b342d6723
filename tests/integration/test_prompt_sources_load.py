"""Each prompt source through a real load run: `sweeper load --dataset` and the level loop against
a real HTTP server that records request bodies, and against the simulator (its prefix cache,
/flush_cache, /metrics and /tokenize). The tests write their own data files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace

from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.engines import get_engine
from sweeper.loadgen.client import StreamOptions
from sweeper.spec.datasets import LengthDistribution, PromptRecord, draw_lengths
from sweeper.loadgen.ladder import LoadPlan, build_prompts
from sweeper.loadgen.standalone import run_load
from sweeper.loadgen.probe import LevelProbe, PrefixCacheApi
from tests.support.fake_servers import MODEL
from tests.support.paths import ROOT
from tests.support.sim import BASELINE_FLAGS, SCALE, launched

SHAREGPT = [
    {"id": "a", "conversations": [{"from": "human", "value": "  Explain KV caches,\nbriefly.  "},
                                  {"from": "gpt", "value": "Keys and values of past tokens, kept."}]},
    {"id": "b", "conversations": [{"from": "human", "value": "Grüße aus Köln \u2603"},
                                  {"from": "gpt", "value": "Hallo zurück"}]},
]


def test_sharegpt_prompts_reach_a_chat_server_verbatim_with_the_replys_length(serve, tmp_path):
    server = serve(token_delay_s=0.01)  # requests long beside the client's turnaround
    path = tmp_path / "share.json"
    path.write_text(json.dumps(SHAREGPT, ensure_ascii=False))
    out = tmp_path / "levels.json"
    result = CliRunner().invoke(app, ["load", server.base_url, "--concurrency", "1,2", "--api", "chat",
                                      "--model", MODEL, "--dataset", str(path), "--json-file", str(out)])
    assert result.exit_code in (0, 3), result.output  # 3: a level invalid (a busy runner's client lag)
    lengths = {"  Explain KV caches,\nbriefly.  ": 7, "Grüße aus Köln \u2603": 2}  # the replies' words
    for body in server.state.payloads:
        [message] = body["messages"]
        assert message["role"] == "user" and body["max_tokens"] == lengths[message["content"]]
    assert {b["messages"][0]["content"] for b in server.state.payloads} == set(lengths)
    assert [(r["completed"], r["failed"]) for r in json.loads(out.read_text())] == [(2, 0), (4, 0)]


def test_jsonl_prompts_reach_a_completions_server_verbatim_counted_by_its_tokenize(serve, tmp_path):
    server = serve(token_delay_s=0.01)
    lines = [{"prompt": "Once upon a time", "output_len": 5}, {"prompt": "ünïcödé\ttabs  stay", "output_len": 3}]
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n")
    out = tmp_path / "levels.json"
    result = CliRunner().invoke(app, ["load", server.base_url, "--concurrency", "2", "--model", MODEL,
                                      "--dataset", str(path), "--engine", "vllm", "--json-file", str(out)])
    assert result.exit_code in (0, 3), result.output  # 3: a level invalid (a busy runner's client lag)
    wanted = {x["prompt"]: x["output_len"] for x in lines}
    sent = [b for b in server.state.payloads if "prompt" in b]
    assert sent and all(wanted[b["prompt"]] == b["max_tokens"] for b in sent)
    [record] = json.loads(out.read_text())
    measured = sent[-record["completed"]:]  # the warmup's requests come first
    # the fake /tokenize counts UTF-8 bytes: the count is the engine's, per prompt, summed per level
    assert record["prompt_tokens_counted"] == sum(len(b["prompt"].encode()) for b in measured)
    assert record["prompt_tokens_counted_by"] == "engine /tokenize"
    assert record["cache_flushed"] is True  # vLLM's /reset_prefix_cache answered
    assert server.state.calls.order[0] == "/reset_prefix_cache"


def test_jsonl_chat_messages_with_shared_prefixes_and_a_flush_before_each_level(serve, tmp_path):
    server = serve(token_delay_s=0.002)
    messages = [({"role": "user", "content": "first question"},),
                ({"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                 {"role": "user", "content": "and then?"})]
    plan = LoadPlan(concurrency=(1, 2, 4), output_len=4, options=StreamOptions(api="chat"),
                    records=tuple(PromptRecord(messages=m) for m in messages), shared_prefix=(24, 2),
                    probe=LevelProbe(server.base_url, MODEL, PrefixCacheApi(flush_path="/flush_cache")))
    levels = run_load(server.base_url, MODEL, plan)
    assert [m["cache_flushed"] for m in levels] == [True, True, True]
    systems = set()
    for body in server.state.payloads:
        system, *rest = body["messages"]
        assert system["role"] == "system" and tuple(rest) in messages  # the record verbatim after it
        systems.add(system["content"])
    assert len(systems) == 2  # each group's prefix is the same bytes on every request and level
    # the flush comes before each level's first request (warmup included), never inside a level
    order = "".join("F" if call == "/flush_cache" else "r" for call in server.state.calls.order)
    assert re.fullmatch(r"(Fr+){3}", order), order
    # each level's requests: its warmup (C) and measured runs (2 C each; more when one is measured again)
    for level, c, run in zip(levels, (1, 2, 4), order.split("F")[1:]):
        assert (len(run) - c) % (2 * c) == 0 and len(run) >= 3 * c and level["completed"] == 2 * c


def test_synthetic_lengths_from_distributions_reach_each_request_as_drawn(serve):
    server = serve(token_delay_s=0.01)
    output = LengthDistribution("lognormal", mean=6, sigma=0.6, min=2, max=16)
    plan = LoadPlan(concurrency=(4,), requests_per_level=24, input_dist=LengthDistribution("uniform", min=8, max=20),
                    output_dist=output, seed=11)
    [level] = run_load(server.base_url, MODEL, plan)
    sent = [(b["prompt"], b["max_tokens"]) for b in server.state.payloads]
    # the measured run's prompts are the seeded ones every config gets (seed + C for the first attempt)
    expected = [(p["prompt"], p["max_tokens"]) for p in build_prompts(plan, 24, plan.seed + 4)]
    assert all(request in sent for request in expected)
    assert sorted(n for _, n in expected) == sorted(draw_lengths(output, 24, plan.seed + 4 + 2))
    words = {len(p.split()) for p, _ in expected}  # synthetic text on a completions server, no tokenizer
    assert words <= set(range(8, 21)) and len(words) > 3
    assert level["prompts_sent_as"] == "text"
    last = sent[-24:]  # the run the level keeps (a run the client's lag spoiled is measured again)
    assert level["total_output_tokens"] == sum(n for _, n in last)  # counted from usage
    assert level["failed"] == 0 and not any("fewer tokens" in r for r in level["invalid_reasons"])


def sim_plan(input_len: int, probe: LevelProbe, **kw) -> LoadPlan:
    return LoadPlan(concurrency=(1, 4), input_len=input_len, output_len=8, time_scale=SCALE, probe=probe, **kw)


def test_shared_prefixes_hit_the_simulators_cache_and_the_hit_rate_is_read_from_its_metrics():
    info = get_engine("sim").info
    with launched([*BASELINE_FLAGS, "--enable-metrics"]) as server:
        server.wait_ready()
        probe = LevelProbe(server.url, "m", info.prefix_cache, info.tokenize)
        levels = run_load(server.url, "m", sim_plan(64, probe, shared_prefix=(64, 2)))
        assert server.output.count("Cache flushed successfully!") == 2  # once before each level
        for level in levels:
            # 64 prefix tokens (4 pages) of 128 a request; a group the warmup missed costs one miss
            assert 0.3 < level["prefix_cache_hit_rate"] <= 0.5, level
            assert level["prompts_sent_as"] == "token ids"  # one fixed input_len: exact ids
            assert level["prompt_tokens_counted"] == level["total_input_tokens"]  # /tokenize and usage agree
        plain = run_load(server.url, "m", sim_plan(128, probe))
        assert [m["prefix_cache_hit_rate"] for m in plain] == [0.0, 0.0]  # distinct prompts: no hits
    with launched([*BASELINE_FLAGS, "--enable-metrics", "--disable-radix-cache"]) as server:
        server.wait_ready()
        probe = LevelProbe(server.url, "m", info.prefix_cache, info.tokenize)
        off = run_load(server.url, "m", sim_plan(64, probe, shared_prefix=(64, 2)))
        assert [m["prefix_cache_hit_rate"] for m in off] == [0.0, 0.0]


def test_dataset_format_given_on_the_command_line(serve, tmp_path):
    """--dataset-format sharegpt reads a ShareGPT file; jsonl given for it: one line naming the
    file and its first line, nothing sent."""
    server = serve(token_delay_s=0.002)
    path = tmp_path / "share.data"
    path.write_text(json.dumps(SHAREGPT, ensure_ascii=False))
    out = tmp_path / "levels.json"
    result = CliRunner().invoke(app, ["load", server.base_url, "--concurrency", "1", "--api", "chat", "--model", MODEL,
                                      "--dataset", str(path), "--dataset-format", "sharegpt", "--json-file", str(out)])
    assert result.exit_code in (0, 3), result.output
    assert {b["messages"][0]["content"] for b in server.state.payloads} <= {c["conversations"][0]["value"]
                                                                           for c in SHAREGPT}
    sent = len(server.state.payloads)
    result = CliRunner().invoke(app, ["load", server.base_url, "--model", MODEL, "--dataset", str(path),
                                      "--dataset-format", "jsonl"])
    assert result.exit_code == 2
    [line] = [ln for ln in result.output.splitlines() if ln.strip()]
    assert f"{path}:1: expected an object" in line and "the content looks like sharegpt" in line
    assert len(server.state.payloads) == sent


def test_a_malformed_dataset_is_one_line_and_nothing_is_sent(serve, tmp_path):
    server = serve()
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "fine"}\n{"prompt": 3}\n')
    result = CliRunner().invoke(app, ["load", server.base_url, "--model", MODEL, "--dataset", str(path)])
    assert result.exit_code == 2
    [line] = [ln for ln in result.output.splitlines() if ln.strip()]
    assert f"{path}:2: expected" in line
    assert server.state.payloads == [] and server.state.calls.order == []


def test_a_first_round_of_long_varied_prompts_sent_together_is_no_stall_on_the_simulator():
    """A closed loop's first C requests reach the server together and prefill as one pass (the
    simulator's SGLang-like scheduler); once lengths vary, later sends are staggered and prefill
    alone. The first round then waits several times longer for its first token with no stall in
    it: valid, as long as it waited no longer per prompt token in prefill alongside it. Before:
    invalid, "the first round waited ... a one-time stall" (9 of 12 ShareGPT trials, bench/README.md)."""
    plan = LoadPlan(concurrency=(8,), requests_per_level=48, time_scale=SCALE, seed=3,
                    input_dist=LengthDistribution("uniform", min=1000, max=3000),
                    output_dist=LengthDistribution("uniform", min=20, max=60))
    with launched(BASELINE_FLAGS) as server:
        server.wait_ready()
        [level] = run_load(server.url, "m", plan)
    assert level["failed"] == 0
    assert not any("first round" in r for r in level["invalid_reasons"]), level["invalid_reasons"]
    assert level["p99_ttft_ms"] > 3 * level["median_ttft_ms"]  # the first round did wait longer


def test_a_refused_flush_is_recorded_on_every_level_and_said_once_with_why(serve, tmp_path):
    """vLLM routes /reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1, else 404: a real `sweeper
    load` process against a server that answers 404 says so once, on stderr, naming the fix."""
    server = serve(token_delay_s=0.002, flush_status=404)
    out = tmp_path / "levels.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "sweeper.cli", "load", server.base_url, "--model", MODEL,
                           "--engine", "vllm", "--concurrency", "1,2", "--json-file", str(out)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode in (0, 3), done.stderr  # 3: a level invalid (a busy runner's client lag)
    [line] = [ln for ln in done.stderr.splitlines() if "refused POST /reset_prefix_cache" in ln]
    assert "VLLM_SERVER_DEV_MODE=1" in line and "cache_flushed: false" in line
    records = json.loads(out.read_text())
    assert [r["cache_flushed"] for r in records] == [False, False]
    assert [len(r["level_notes"]) for r in records] == [1, 0]  # said once, on the first level
    assert server.state.calls.order.count("/reset_prefix_cache") == 2  # still asked before each level


def test_a_level_never_repeats_a_record_until_the_dataset_runs_out(serve, tmp_path, caplog):
    """Warm-up and measured runs of a level take one seeded order of the dataset in turn (before:
    each run its own shuffle, so a level repeated records of a dataset larger than it); a level
    needing more says so in one line and records how many repeated."""
    server = serve(token_delay_s=0.002)
    records = tuple(PromptRecord(text=f"question number {i}", output_len=3) for i in range(12))
    plan = LoadPlan(concurrency=(2, 4), records=records, min_rounds=2, warmup_rounds=1)
    levels = run_load(server.base_url, MODEL, plan)
    prompts = [b["prompt"] for b in server.state.payloads]
    # C=2: 2 warm-up + 4 measured; C=4: 4 + 8; a run the client's lag spoiled (a busy runner) is
    # measured again with the next records of the same order
    sent = [c + 2 * c * (1 + m["harness_retries"]) for c, m in zip((2, 4), levels)]
    c2, c4 = prompts[:sent[0]], prompts[sent[0]:]
    assert len(c4) == sent[1]
    for level, level_prompts in zip(levels, (c2, c4)):
        first = level_prompts[:12]
        assert len(set(first)) == len(first)  # each record once before any comes again
        assert level["dataset_records_reused"] == max(0, len(level_prompts) - 12)
    if sent[0] <= 12:
        assert levels[0]["level_notes"] == []
    small = replace(plan, records=records[:5], concurrency=(2,))
    [level] = run_load(server.base_url, MODEL, small)
    sent = 2 + 4 * (1 + level["harness_retries"])
    assert level["dataset_records_reused"] == sent - 5  # 6 requests from 5 records (without a retry)
    [note] = level["level_notes"]
    assert note.startswith(f"the dataset has 5 records and this level sent {sent} requests") and "inflated" in note
    said = [r.getMessage() for r in caplog.records if "the dataset has" in r.getMessage()]
    assert said[-1] == note and said.count(note) == 1  # logged once (the first plan's levels may have said theirs)
