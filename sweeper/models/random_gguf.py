"""A llama-architecture GGUF with random weights and a real (llama/SentencePiece-style) tokenizer,
so llama-server loads and serves it like any model: a real engine without a model hub.

Pure builders (`model_shape`, `build_vocab`, `build_tensors`) and one writer (`write_random_gguf`).
Same arguments and seed, same bytes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sweeper.errors import import_optional

HEAD_DIM = 64
# llama-2's vocabulary size: sweeper's load generator sends prompt token ids below 32000
VOCAB = 32000
DTYPES = ("f32", "f16", "q8_0")
CHAT_TEMPLATE = ("{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
                 "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}")

FIRST_PIECE = 3 + 256  # <unk>, <s>, </s>, then the byte tokens; made-up pieces from here
# token types of the GGUF llama vocabulary (gguf.TokenType)
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6


@dataclass(frozen=True)
class ModelShape:
    layers: int
    width: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    context: int

    @property
    def parameters(self) -> int:
        attention = 2 * self.width * self.width + 2 * self.width * self.kv_heads * HEAD_DIM
        per_layer = attention + 3 * self.width * self.ffn + 2 * self.width
        return self.layers * per_layer + 2 * self.vocab * self.width + self.width


def model_shape(layers: int, width: int, vocab: int = VOCAB, context: int = 4096) -> ModelShape:
    """Heads of 64 dims, full-size KV heads, a 4x feed-forward."""
    if layers < 1:
        raise ValueError("layers must be >= 1")
    if width < HEAD_DIM or width % HEAD_DIM:
        raise ValueError(f"width must be a positive multiple of {HEAD_DIM}")
    if vocab < 259 + 26:
        raise ValueError("vocab must hold the 3 special tokens, 256 byte tokens and some pieces")
    heads = width // HEAD_DIM
    return ModelShape(layers=layers, width=width, heads=heads, kv_heads=heads, ffn=4 * width,
                      vocab=vocab, context=context)


def _pieces() -> list[str]:
    """Made-up word pieces, most useful first: letters, then letter pairs, with and without the
    SentencePiece word-start mark."""
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    singles = [c for c in letters]
    pairs = [a + b for a in letters for b in letters]
    triples = [a + b + c for a in letters for b in letters for c in letters]
    out: list[str] = []
    for group in (singles, pairs, triples):
        out += ["\u2581" + p for p in group] + group
    return out


def build_vocab(size: int) -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and types: <unk>, <s>, </s>, the 256 byte-fallback tokens <0x00>..<0xFF> (so
    any UTF-8 text tokenizes), then made-up pieces scored -rank."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256
    pieces = _pieces()
    needed = size - len(tokens)
    if needed > len(pieces):
        raise ValueError(f"vocab {size} is larger than the {len(tokens) + len(pieces)} tokens this builder makes")
    tokens += pieces[:needed]
    types += [NORMAL] * needed
    scores = [0.0] * FIRST_PIECE + [-float(rank) for rank in range(needed)]
    return tokens, scores, types


def build_tensors(shape: ModelShape, seed: int) -> dict[str, np.ndarray]:
    """Every tensor as float32 in numpy order (rows = outputs): normal(0, 0.02) weights, norms of
    ones, and output rows of zeros for the control and byte tokens."""
    rng = np.random.default_rng(seed)
    w, kv = shape.width, shape.kv_heads * HEAD_DIM

    def weight(rows: int, cols: int) -> np.ndarray:
        return rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(0.02)

    tensors = {"token_embd.weight": weight(shape.vocab, w)}
    for n in range(shape.layers):
        tensors |= {
            f"blk.{n}.attn_norm.weight": np.ones(w, dtype=np.float32),
            f"blk.{n}.attn_q.weight": weight(w, w),
            f"blk.{n}.attn_k.weight": weight(kv, w),
            f"blk.{n}.attn_v.weight": weight(kv, w),
            f"blk.{n}.attn_output.weight": weight(w, w),
            f"blk.{n}.ffn_norm.weight": np.ones(w, dtype=np.float32),
            f"blk.{n}.ffn_gate.weight": weight(shape.ffn, w),
            f"blk.{n}.ffn_up.weight": weight(shape.ffn, w),
            f"blk.{n}.ffn_down.weight": weight(w, shape.ffn),
        }
    tensors["output_norm.weight"] = np.ones(w, dtype=np.float32)
    output = weight(shape.vocab, w)
    # Control and byte tokens get zero logits, below the best of the random pieces, so greedy
    # decoding never emits them: a byte token can be half a UTF-8 character, which the server holds
    # back and streams merged with the next token, and </s> would end a request early.
    output[:FIRST_PIECE] = 0.0
    tensors["output.weight"] = output
    return tensors


def write_random_gguf(path: Path, layers: int, width: int, seed: int = 0, dtype: str = "f16",
                      vocab: int = VOCAB, context: int = 4096) -> ModelShape:
    """Write the model to `path` (atomically) and return its shape."""
    gguf = import_optional("gguf", "models", "writing a GGUF model")  # only this writer needs it

    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}")
    shape = model_shape(layers, width, vocab=vocab, context=context)
    file_type = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                 "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[dtype]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    writer = gguf.GGUFWriter(str(partial), "llama")
    writer.add_name(f"sweeper-random-{layers}x{width}-seed{seed}")
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.width)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(shape.vocab)
    writer.add_file_type(file_type)
    tokens, scores, types = build_vocab(shape.vocab)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    for name, array in build_tensors(shape, seed).items():
        if array.ndim == 1 or dtype == "f32":
            writer.add_tensor(name, array)
        elif dtype == "f16":
            writer.add_tensor(name, array.astype(np.float16))
        else:
            quantized = gguf.quants.quantize(array, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(name, quantized, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.replace(path)
    return shape
