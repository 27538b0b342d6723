"""Real vLLM 0.24.0 streams (tests/fixtures/vllm/sse_*.jsonl: every socket read of one streamed
request on the H200, its time and bytes) replayed through the client's stream reader."""

import json

from sweeper.loadgen.stream import StreamSink, StreamTally
from tests.support.paths import FIXTURE_DIR

FIXTURES = FIXTURE_DIR / "vllm"


def load_reads(name: str) -> tuple[dict, list[tuple[float, bytes]]]:
    lines = [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()]
    return lines[0], [(line["t"], line["b"].encode()) for line in lines[1:]]


def replay(reads: list[tuple[float, bytes]]) -> tuple[StreamTally, str]:
    sink = StreamSink(StreamTally())
    sink.sent(0.0)
    sink.head(200, {})
    for at, data in reads:
        sink.body(data, at)
    return sink.tally, sink.outcome()


def test_trailing_empty_text_chunks_are_counted_from_their_usage_deltas():
    """52 of the 64 tokens decode to no text (a special placeholder token the random model keeps
    emitting); vLLM still sends one chunk per token with continuous usage. Before: streamed 12 of
    usage 64, the level invalid."""
    _, reads = load_reads("sse_completions_0.jsonl")
    tally, error = replay(reads)
    assert error == ""
    assert tally.completion_tokens == 64
    assert sum(tally.chunk_tokens) == 64
    token_chunks = sum(b'"choices":[{' in event for _, data in reads for event in data.split(b"\n\n"))
    assert len(tally.chunk_times) == token_chunks == 63  # one arrival per chunk (the last holds 2 tokens)
    assert tally.chunk_times == sorted(tally.chunk_times)


def test_a_stream_of_almost_only_empty_text_counts_every_token():
    _, reads = load_reads("sse_completions_1.jsonl")  # 63 of 64 chunks carry no text ("streamed 0")
    tally, error = replay(reads)
    assert error == "" and tally.completion_tokens == 64 and sum(tally.chunk_tokens) == 64


def test_chat_stream_counts_match_usage():
    _, reads = load_reads("sse_chat_0.jsonl")
    tally, error = replay(reads)
    assert error == "" and tally.completion_tokens == 64 and sum(tally.chunk_tokens) == 64


def test_chunks_missing_mid_stream_are_recounted_from_the_next_usage_delta():
    _, reads = load_reads("sse_completions_0.jsonl")
    events = b"".join(data for _, data in reads).split(b"\n\n")
    tally, error = replay([(1.0, b"\n\n".join(events[:20] + events[30:]))])
    assert error == "" and sum(tally.chunk_tokens) == tally.completion_tokens == 64


def test_a_real_shortfall_still_disagrees_with_usage():
    """The last ten token chunks really missing (the final usage-only chunk kept): no chunk's
    usage explains them, so the streamed count stays short and the level stays invalid."""
    _, reads = load_reads("sse_completions_0.jsonl")
    events = b"".join(data for _, data in reads).split(b"\n\n")
    token = [i for i, e in enumerate(events) if b'"choices":[{' in e]
    kept = [e for i, e in enumerate(events) if i not in token[-10:]]
    tally, error = replay([(1.0, b"\n\n".join(kept))])
    assert error == ""
    assert tally.completion_tokens == 64
    assert sum(tally.chunk_tokens) == 53  # the last of them held 2 tokens


def test_out_of_vocabulary_error_inside_an_http_200_stream_fails_the_request_with_its_message():
    request, reads = load_reads("sse_out_of_vocab.jsonl")
    assert request["status"] == 200
    tally, error = replay(reads)
    assert error.startswith("error in stream: ")
    assert "Token id 40000 is out of vocabulary" in error


def test_a_final_usage_total_after_chunks_without_usage_is_not_counted_twice():
    """llama-server: text chunks carry no usage, the final empty chunk carries the total (32). That
    total is the whole reply, not the tokens of an empty chunk: 32 streamed, not 64."""
    body = b"".join(b'data: {"choices":[{"index":0,"text":"w","finish_reason":null}]}\n\n' for _ in range(32))
    body += (b'data: {"choices":[{"index":0,"text":"","finish_reason":"length"}],'
             b'"usage":{"prompt_tokens":8,"completion_tokens":32,"total_tokens":40}}\n\ndata: [DONE]\n\n')
    tally, _ = replay([(0.01 * i, line + b"\n\n") for i, line in enumerate(body.split(b"\n\n")) if line])
    tally.finish()
    assert sum(tally.chunk_tokens) == 32 and tally.completion_tokens == 32
