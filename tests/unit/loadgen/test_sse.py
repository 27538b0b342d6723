from sweeper.loadgen.sse import SseDataDecoder


def feed_all(pieces: list[bytes]) -> list[str]:
    decoder = SseDataDecoder()
    out = [payload for piece in pieces for payload in decoder.feed(piece)]
    return out + decoder.flush()


STREAM = 'data: {"text":"é"}\n\n: ping\n\nevent: x\nid: 3\ndata:{"n":2}\r\n\r\ndata: [DONE]\n\n'.encode()


def test_payloads_in_order_skipping_comments_fields_and_blank_lines():
    assert feed_all([STREAM]) == ['{"text":"é"}', '{"n":2}', "[DONE]"]


def test_any_split_of_the_bytes_gives_the_same_payloads():
    for cut in range(1, len(STREAM)):  # inside "data:", inside the two-byte é, inside \r\n
        assert feed_all([STREAM[:cut], STREAM[cut:]]) == ['{"text":"é"}', '{"n":2}', "[DONE]"], cut
    assert feed_all([STREAM[i:i + 1] for i in range(len(STREAM))]) == ['{"text":"é"}', '{"n":2}', "[DONE]"]


def test_a_last_line_without_newline_comes_out_at_flush():
    decoder = SseDataDecoder()
    assert decoder.feed(b"data: [DO") == []
    assert decoder.feed(b"NE]") == []
    assert decoder.flush() == ["[DONE]"]
    assert decoder.flush() == []


def test_only_a_line_that_starts_with_the_data_field_is_data():
    assert feed_all([b"xdata: 1\n data: 2\ndata 3\ndata: 4\n"]) == ["4"]


def test_invalid_utf8_is_replaced_not_raised():
    assert feed_all([b"data: \xff\xfe\n"]) == ["\ufffd\ufffd"]
