"""The random-weight GGUF builder: a real tokenizer in the metadata, the llama tensor set, and
the same bytes for the same seed."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from sweeper.models.random_gguf import (
    BYTE, CONTROL, UNKNOWN, build_tensors, build_vocab, model_shape, write_random_gguf,
)


def test_vocab_has_specials_then_byte_fallback_then_pieces():
    tokens, scores, types = build_vocab(1000)
    assert len(tokens) == len(scores) == len(types) == 1000 == len(set(tokens))
    assert tokens[:3] == ["<unk>", "<s>", "</s>"] and types[:3] == [UNKNOWN, CONTROL, CONTROL]
    assert tokens[3:259] == [f"<0x{b:02X}>" for b in range(256)] and set(types[3:259]) == {BYTE}
    assert scores[259:262] == [0.0, -1.0, -2.0]


def test_shape_checks_its_arguments():
    assert model_shape(4, 256).heads == 4
    for layers, width in ((0, 256), (4, 100)):
        with pytest.raises(ValueError):
            model_shape(layers, width)


def test_tensors_are_the_llama_set_with_output_rows_first():
    shape = model_shape(2, 128, vocab=500)
    tensors = build_tensors(shape, seed=1)
    assert tensors["token_embd.weight"].shape == (500, 128)
    assert tensors["blk.1.ffn_down.weight"].shape == (128, 512)
    assert np.all(tensors["blk.0.attn_norm.weight"] == 1)
    assert sum(t.size for t in tensors.values()) == shape.parameters
    assert abs(float(tensors["output.weight"][259:].std()) - 0.02) < 0.002
    assert not tensors["output.weight"][:259].any()  # greedy never picks a control or byte token


@pytest.mark.parametrize("dtype", ["f16", "q8_0"])
def test_written_file_reads_back_and_is_deterministic(tmp_path, dtype):
    a, b, c = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "c.gguf"
    write_random_gguf(a, 2, 128, seed=7, dtype=dtype, vocab=600)
    write_random_gguf(b, 2, 128, seed=7, dtype=dtype, vocab=600)
    write_random_gguf(c, 2, 128, seed=8, dtype=dtype, vocab=600)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    reader = gguf.GGUFReader(str(a))
    fields = reader.fields
    assert fields["general.architecture"].contents() == "llama"
    assert fields["tokenizer.ggml.model"].contents() == "llama"
    assert fields["llama.block_count"].contents() == 2
    assert len(fields["tokenizer.ggml.tokens"].contents()) == 600
    assert {t.name for t in reader.tensors} >= {"token_embd.weight", "blk.1.ffn_gate.weight", "output.weight"}
    assert not list(tmp_path.glob("*.partial"))
