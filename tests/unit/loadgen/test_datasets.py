"""Prompt sources: dataset files the tests write themselves (no network), and length distributions."""

import json
import statistics

import pytest

from sweeper.spec.datasets import (DatasetError, LengthDistribution, PromptRecord, draw_lengths, guess_format,
                                      load_dataset, sample_records)

SHAREGPT = [
    {"id": "a", "conversations": [{"from": "human", "value": "Explain KV caches."},
                                  {"from": "gpt", "value": "A KV cache keeps keys and values of past tokens."}]},
    {"id": "b", "conversations": [{"from": "gpt", "value": "I speak first, nobody asked."}]},  # skipped
    {"id": "c", "conversations": [{"from": "system", "value": "be brief"},
                                  {"from": "human", "value": "Grüße aus Köln: ünïcödé stays as it is  "},
                                  {"from": "gpt", "value": "Hallo"}]},
]


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_sharegpt_first_human_turn_verbatim_and_the_reply_length(tmp_path):
    path = write(tmp_path, "share.json", json.dumps(SHAREGPT))
    assert guess_format(path) == "sharegpt"
    records = load_dataset(path)
    assert records == [PromptRecord(text="Explain KV caches.", output_len=10),
                       PromptRecord(text="Grüße aus Köln: ünïcödé stays as it is  ", output_len=1)]
    by_chars = load_dataset(path, count_tokens=len)
    assert [r.output_len for r in by_chars] == [len(SHAREGPT[0]["conversations"][1]["value"]), 5]


def test_jsonl_prompts_and_chat_messages(tmp_path):
    lines = [{"prompt": "Once upon a time", "output_len": 40}, {"messages": [{"role": "system", "content": "s"},
                                                                               {"role": "user", "content": "hi"}]}]
    path = write(tmp_path, "d.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n\n")
    assert guess_format(path) == "jsonl"
    records = load_dataset(path)
    assert records[0] == PromptRecord(text="Once upon a time", output_len=40)
    assert records[1].messages[1] == {"role": "user", "content": "hi"} and records[1].output_len is None


@pytest.mark.parametrize("name, text, fmt, message", [
    ("bad.jsonl", '{"prompt": "a"}\n{"prompt": \n', None, "bad.jsonl:2: not valid JSON"),
    ("bad.jsonl", '{"prompt": "a"}\n{"text": "b"}\n', None, 'bad.jsonl:2: expected "prompt"'),
    ("bad.jsonl", '{"prompt": "a", "output_len": 0}\n', None, "bad.jsonl:1: output_len must be a whole number >= 1"),
    ("bad.json", '[{"conversations": "x"}]', None, "bad.json: record 1 of the array (from 1): expected"),
    ("bad.json", '[{"conversations": [{"from": "human"}]}]', None, "bad.json: record 1 of the array (from 1): turn 1: expected"),
    ("bad.json", '[1, 2', "sharegpt", "bad.json: not valid JSON"),
    ("empty.json", "[]", None, "empty.json: no usable record"),
    ("x.txt", "hello", "csv", "unknown dataset format 'csv'"),
])
def test_a_malformed_file_names_the_file_and_the_record(tmp_path, name, text, fmt, message):
    path = write(tmp_path, name, text)
    with pytest.raises(DatasetError) as info:
        load_dataset(path, fmt)
    assert message in str(info.value) and len(str(info.value).splitlines()) == 1


@pytest.mark.parametrize("text, given, message", [
    # ShareGPT read as JSONL: its first line is no object
    (json.dumps(SHAREGPT), "jsonl", 'share.data:1: expected an object with "prompt" or "messages" '
                                    "(read as jsonl, the format given; the content looks like sharegpt)"),
    (json.dumps(SHAREGPT, indent=1), "jsonl", "share.data:1: not valid JSON"),
    # JSONL read as ShareGPT: one line is one object, no array; two lines are no JSON at all
    ('{"prompt": "a"}\n', "sharegpt", "share.data: a ShareGPT file is a JSON array of conversations "
                                      "(read as sharegpt, the format given; the content looks like jsonl)"),
    ('{"prompt": "a"}\n{"prompt": "b"}\n', "sharegpt", "share.data: not valid JSON: Extra data: line 2"),
])
def test_a_wrong_format_given_is_one_line_naming_file_record_and_the_likely_format(tmp_path, text, given, message):
    path = write(tmp_path, "share.data", text)
    with pytest.raises(DatasetError) as info:
        load_dataset(path, given)
    assert message in str(info.value) and len(str(info.value).splitlines()) == 1
    other = "sharegpt" if given == "jsonl" else "jsonl"
    assert f"the content looks like {other}" in str(info.value)


def test_a_format_given_reads_the_file_as_that_format(tmp_path):
    share = write(tmp_path, "share.data", json.dumps(SHAREGPT))
    lines = write(tmp_path, "lines.data", '{"prompt": "a", "output_len": 3}\n')
    assert load_dataset(share, "sharegpt") == load_dataset(share)
    assert load_dataset(lines, "jsonl") == [PromptRecord(text="a", output_len=3)]


def test_a_missing_file(tmp_path):
    with pytest.raises(DatasetError, match="dataset file not found"):
        load_dataset(tmp_path / "nope.jsonl")


def test_sampling_is_seeded_and_covers_the_dataset_before_repeating():
    records = [PromptRecord(text=str(i)) for i in range(5)]
    first = sample_records(records, 12, seed=3)
    assert first == sample_records(records, 12, seed=3) and first != sample_records(records, 12, seed=4)
    assert sorted(r.text for r in first[:5]) == [str(i) for i in range(5)]


@pytest.mark.parametrize("dist", [
    LengthDistribution("fixed", mean=64),
    LengthDistribution("uniform", min=10, max=20),
    LengthDistribution("normal", mean=200, std=40, min=50, max=400),
    LengthDistribution("lognormal", mean=300, std=150, min=8, max=2000),
])
def test_lengths_follow_their_distribution_within_bounds(dist):
    lengths = draw_lengths(dist, 4000, seed=1)
    assert lengths == draw_lengths(dist, 4000, seed=1) and all(isinstance(v, int) for v in lengths)
    assert min(lengths) >= dist.min and (dist.max is None or max(lengths) <= dist.max)
    if dist.kind in ("fixed", "normal", "lognormal"):
        assert statistics.fmean(lengths) == pytest.approx(dist.mean, rel=0.03)
    if dist.kind in ("normal", "lognormal"):
        assert statistics.pstdev(lengths) == pytest.approx(dist.std, rel=0.08)
    if dist.kind == "uniform":
        assert set(lengths) == set(range(10, 21))
