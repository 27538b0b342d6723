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
