import pytest

from sweeper.loadgen.workload import MIN_TOKEN_ID, build_prompt_token_ids


def test_same_seed_gives_same_prompts():
    assert build_prompt_token_ids(8, 64, seed=7) == build_prompt_token_ids(8, 64, seed=7)


def test_different_seed_gives_different_prompts():
    assert build_prompt_token_ids(8, 64, seed=7) != build_prompt_token_ids(8, 64, seed=8)


def test_pinned_values_do_not_drift_across_releases():
    # Prompts must stay identical across numpy/Python upgrades so old results stay comparable.
    assert build_prompt_token_ids(1, 4, seed=0) == [[11271, 13217, 30124, 29633]]


def test_every_prompt_has_exact_length_and_plain_ids():
    prompts = build_prompt_token_ids(16, 100, seed=1, vocab_size=1000)
    assert len(prompts) == 16
    for ids in prompts:
        assert len(ids) == 100
        assert all(isinstance(i, int) for i in ids)
        assert min(ids) >= MIN_TOKEN_ID
        assert max(ids) < 1000


def test_prompts_differ_per_request_even_when_tiny():
    # One id from a 2-id vocabulary: only 2 distinct prompts exist, and both must be used.
    prompts = build_prompt_token_ids(2, 1, seed=3, vocab_size=MIN_TOKEN_ID + 2)
    assert sorted(prompts) == [[MIN_TOKEN_ID], [MIN_TOKEN_ID + 1]]
    many = build_prompt_token_ids(64, 1, seed=3)
    assert len({tuple(p) for p in many}) == 64


def test_longer_list_extends_shorter_one():
    assert build_prompt_token_ids(10, 32, seed=5)[:4] == build_prompt_token_ids(4, 32, seed=5)


def test_zero_requests_is_empty():
    assert build_prompt_token_ids(0, 16, seed=0) == []


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(n_requests=-1, input_len=4, seed=0),
        dict(n_requests=1, input_len=0, seed=0),
        dict(n_requests=1, input_len=4, seed=-1),
        dict(n_requests=1, input_len=4, seed=0, vocab_size=MIN_TOKEN_ID),
        dict(n_requests=3, input_len=1, seed=0, vocab_size=MIN_TOKEN_ID + 2),
    ],
)
def test_impossible_requests_raise(kwargs):
    with pytest.raises(ValueError):
        build_prompt_token_ids(**kwargs)


# ---------------------------------------------------------------- text prompts, open-loop schedules

from sweeper.loadgen.endpoints import build_request_body, choice_text, endpoint_url  # noqa: E402
from sweeper.loadgen.workload import (  # noqa: E402
    arrival_offsets_s,
    build_prompt_texts,
    exact_lengths,
)


def test_text_prompts_are_seeded_distinct_and_about_input_len_words():
    texts = build_prompt_texts(5, 12, seed=3)
    assert texts == build_prompt_texts(5, 12, seed=3)
    assert texts != build_prompt_texts(5, 12, seed=4)
    assert len(set(texts)) == 5
    assert all(len(t.split()) == 12 for t in texts)


def test_text_prompts_of_exact_length_with_a_tokenizer(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    corpus = build_prompt_texts(200, 30, seed=0)
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"]))
    texts = build_prompt_texts(20, 17, seed=1, tokenizer=tok)
    assert exact_lengths(texts, tok) == [17] * 20


def test_arrival_offsets_fixed_and_poisson():
    assert arrival_offsets_s(4, 2.0, poisson=False, seed=0) == [0.0, 0.5, 1.0, 1.5]
    times = arrival_offsets_s(2000, 10.0, poisson=True, seed=7)
    assert times == arrival_offsets_s(2000, 10.0, poisson=True, seed=7)
    assert times[0] == 0.0 and times == sorted(times)
    assert times[-1] / 1999 == pytest.approx(0.1, rel=0.1)  # mean gap 1/rate
    assert arrival_offsets_s(0, 1.0, poisson=True, seed=0) == []
    with pytest.raises(ValueError):
        arrival_offsets_s(3, 0.0, poisson=False, seed=0)


def test_request_bodies_per_api():
    assert endpoint_url("http://h:1/", "chat") == "http://h:1/v1/chat/completions"
    body = build_request_body("completions", "m", [101, 102], 8, stream=True,
                              continuous_usage=True, min_tokens=True)
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["min_tokens"] == 8 and body["ignore_eos"] is True
    whole = build_request_body("chat", "m", "hi", 3, stream=False)
    assert whole == {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                     "max_tokens": 3, "temperature": 0}
    assert endpoint_url("http://h:1", "generate") == "http://h:1/generate"
    assert build_request_body("generate", "m", "hi", 3, stream=False) == {
        "text": "hi", "sampling_params": {"max_new_tokens": 3, "temperature": 0}, "stream": False}
    with pytest.raises(ValueError):
        endpoint_url("http://h", "responses")


def test_choice_text_reads_completions_and_chat():
    assert choice_text({"text": "a"}) == "a"
    assert choice_text({"delta": {"content": "b"}}) == "b"
    assert choice_text({"delta": {"role": "assistant"}}) == ""
    assert choice_text({"message": {"content": "c"}}) == "c"
