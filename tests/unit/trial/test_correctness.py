"""The correctness gate's judgement: tolerant token agreement, the logprob fingerprint, the
detector without a reference, and reference files."""

import json

import pytest

from sweeper.spec.space import OutputCheck
from sweeper.trial.gate import OutputSample, agree, common_prefix, judge, load_reference_file, logprob_difference, token_agreement, write_reference_file
from sweeper.errors import ConfigError
from sweeper.sim import text as simtext

CHECK = OutputCheck(prompts=["a", "b"], k_tokens=4, min_agreement=0.6, max_logprob_diff=0.5)


def sample(prompt, words, logprobs=None, tokens=True):
    text = "".join(" " + w for w in words)
    return OutputSample(prompt, text, [" " + w for w in words] if tokens else None, logprobs)


REF = [sample("a", ["Paris", ".", "It", "is", "big"], [-1.0, -2.0]),
       sample("b", ["100", "degrees", "Celsius", "at", "sea"], [-0.5, -3.0])]


def test_common_prefix_counts_up_to_the_first_difference():
    assert common_prefix(["a", "b", "c"], ["a", "b", "x", "c"]) == 2
    assert common_prefix([], ["a"]) == 0


def test_identical_outputs_pass_with_full_agreement():
    verdict = judge(REF, REF, CHECK)
    assert verdict.passed and verdict.agreement == 1.0 and verdict.logprob_diff == 0.0


def test_a_late_flip_within_k_passes_and_is_measured():
    flipped = [sample("a", ["Paris", ".", "The", "city"], [-1.02, -1.97]), REF[1]]
    verdict = judge(flipped, REF, CHECK)
    assert verdict.passed and verdict.agreement == pytest.approx(6 / 8)  # 2 of 4, then 4 of 4


def test_only_the_first_k_tokens_count():
    late = [sample("a", ["Paris", ".", "It", "is", "tiny"], [-1.0, -2.0]), REF[1]]
    assert token_agreement(late, REF, 4) == 1.0 and token_agreement(late, REF, 5) == pytest.approx(9 / 10)


def test_early_divergence_on_every_prompt_fails_with_both_texts_named():
    wrong = [sample("a", ["London", "is"], [-1.0, -2.0]), sample("b", ["50", "degrees"], [-0.5, -3.0])]
    verdict = judge(wrong, REF, CHECK)
    assert not verdict.passed and verdict.agreement == 0.0
    assert "agreement 0%" in verdict.reasons[0] and "London" in verdict.reasons[0] and "Paris" in verdict.reasons[0]


def test_the_logprob_fingerprint_catches_broken_weights_even_when_the_text_agrees():
    same_text_bad_numbers = [sample("a", ["Paris", ".", "It", "is"], [-6.0, -9.0]),
                             sample("b", ["100", "degrees", "Celsius", "at"], [-4.0, -0.1])]
    verdict = judge(same_text_bad_numbers, REF, CHECK)
    assert not verdict.passed and verdict.agreement == 1.0 and "nats" in verdict.reasons[0]


def test_no_logprobs_on_either_side_skips_the_fingerprint_and_compares_words():
    plain = [OutputSample("a", " Paris . It is big"), OutputSample("b", " 100 degrees Celsius at sea")]
    assert logprob_difference(plain, REF) is None
    verdict = judge(plain, REF, CHECK)
    assert verdict.passed and verdict.logprob_diff is None and verdict.agreement == 1.0


def test_a_prompt_missing_from_the_reference_fails():
    verdict = judge([sample("c", ["x"])], REF, CHECK)
    assert not verdict.passed and "no answer for prompt 'c'" in verdict.reasons[0]


def test_without_a_reference_the_garbage_detector_judges_each_prompt():
    assert judge(REF, None, CHECK).passed
    soup = [REF[0], OutputSample("b", " ¤Ã?▁Ġ * ½#ð%# ^*¤Ġ~ Ċ<ð%¤ð ~?¤Ã")]
    verdict = judge(soup, None, CHECK)
    assert not verdict.passed and verdict.compared_with == "garbage detector" and "prompt 'b'" in verdict.reasons[0]


def test_agreement_is_checked_both_ways():
    truncated = [sample("a", ["Paris"], [-1.0, -2.0]), sample("b", ["100"], [-0.5, -3.0])]
    assert judge(REF, truncated, CHECK).passed  # against a 1-token reference, everything agrees
    assert not judge(truncated, REF, CHECK).passed
    assert not agree(truncated, REF, CHECK) and not agree(REF, truncated, CHECK) and agree(REF, REF, CHECK)


def sim_samples(prompts, numerics=0, garbage_seed=None, k=16):
    out = []
    for prompt in prompts:
        key = simtext.prompt_key(prompt)
        if garbage_seed is None:
            stream = simtext.GreedyStream(key, numerics)
            text = "".join(stream(i) for i in range(k))
            lps = [simtext.token_logprob(b"prompt|" + key, i, numerics) for i in range(1, len(prompt.split()))]
        else:
            text = "".join(simtext.garbage_token(garbage_seed, key, i) for i in range(k))
            lps = [simtext.garbage_logprob(garbage_seed, b"prompt|" + key, i) for i in range(1, len(prompt.split()))]
        out.append(OutputSample(prompt, text, text.split(), lps))  # tokens as words: the sim's tokens
    return out


def test_sim_numerics_differ_across_tp_sizes_yet_every_pair_passes():
    check = OutputCheck()
    prompts = check.prompt_set
    differing = 0
    for ref_tp in (1, 2, 4, 8):
        for tp in (1, 2, 4, 8):
            samples, reference = sim_samples(prompts, tp), sim_samples(prompts, ref_tp)
            differing += samples != reference
            assert judge(samples, reference, check).passed, (ref_tp, tp)
    assert differing == 12  # every pair of different TP sizes differs somewhere (text or logprobs)


def test_every_sim_garbage_config_fails_against_every_tp_reference():
    check = OutputCheck()
    for config in range(100):
        seed = simtext.config_seed(f"config-{config}")
        garbage = sim_samples(check.prompt_set, garbage_seed=seed)
        assert not judge(garbage, None, check).passed
        for tp in (1, 2, 4, 8):
            verdict = judge(garbage, sim_samples(check.prompt_set, tp), check)
            assert not verdict.passed and verdict.agreement == 0.0


def test_reference_files_round_trip_and_bad_ones_name_the_key(tmp_path):
    path = tmp_path / "ref.json"
    write_reference_file(path, REF, "by hand")
    assert load_reference_file(path, CHECK) == REF
    path.write_text(json.dumps({"samples": [{"prompt": "a", "text": 3}]}))
    with pytest.raises(ConfigError, match=r"samples\[0\]: expected an object with string 'prompt' and 'text'"):
        load_reference_file(path, CHECK)
    path.write_text(json.dumps({"samples": [{"prompt": "a", "text": "x"}]}))
    with pytest.raises(ConfigError, match="no answer for the check prompt 'b'"):
        load_reference_file(path, CHECK)
    with pytest.raises(ConfigError, match="reference file not found"):
        load_reference_file(tmp_path / "missing.json", CHECK)


def test_a_space_naming_one_prompt_keeps_a_single_prompt_check():
    assert OutputCheck(prompt="Hi").prompt_set == ["Hi"]
    assert len(OutputCheck().prompt_set) == 4
    assert OutputCheck(prompt="Hi", prompts=["x", "y"]).prompt_set == ["x", "y"]


class _Engine:
    """A real HTTP server answering /v1/completions like an engine without logprobs or echo."""

    def __init__(self, refuse_logprobs: bool):
        import http.server
        import threading

        requests_seen = self.requests = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                requests_seen.append(body)
                if refuse_logprobs and ("logprobs" in body or "echo" in body):
                    self.send_response(400)
                    self.end_headers()
                    self.wfile.write(b'{"error": "logprobs not supported"}')
                    return
                reply = {"choices": [{"text": " Paris is the capital", "logprobs": None}],
                         "usage": {"prompt_tokens": 5, "completion_tokens": 4}}
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()


@pytest.mark.parametrize("refuse", [True, False])
def test_an_engine_without_logprobs_is_asked_again_and_compared_by_words(refuse):
    from sweeper.trial.gate import collect_samples

    engine = _Engine(refuse_logprobs=refuse)
    try:
        check = OutputCheck(prompts=["The capital of France is", "Water boils at"], max_tokens=4)
        samples = collect_samples(engine.url, "m", check, timeout_s=10)
    finally:
        engine.close()
    assert [s.text for s in samples] == [" Paris is the capital"] * 2
    assert all(s.tokens is None and s.prompt_logprobs is None for s in samples)
    # refused: one logprobs try, then plain requests only; accepted but ignored: no tokens either
    with_logprobs = [r for r in engine.requests if "logprobs" in r]
    assert len(with_logprobs) == (1 if refuse else 3)  # ignored: 2 completions + 1 echo, then echo given up
    assert judge(samples, [OutputSample(p, " Paris is the capital") for p in check.prompt_set], check).passed
