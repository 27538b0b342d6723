"""The served model's vocabulary, so prompt token ids stay inside it (pure parsers, one reader).

An engine refuses an id it cannot embed: vLLM 0.24 answers "Token id 31647 is out of vocabulary"
(inside an HTTP 200 stream) for any id above max(tokenizer's largest id, config vocab_size - 1).
Ids below the smaller of the two sizes are valid for the model and its tokenizer alike.
"""

from __future__ import annotations

import json
from typing import Callable

# Without a readable model folder (a hub name, a GGUF file, a simulator): llama-2's size, what
# the load generator always assumed.
DEFAULT_VOCAB_SIZE = 32000


def config_vocab_size(text: str) -> int | None:
    """vocab_size of a Hugging Face config.json (top level, or its text_config)."""
    try:
        config = json.loads(text)
    except ValueError:
        return None
    for holder in (config, config.get("text_config") or {}):
        size = holder.get("vocab_size") if isinstance(holder, dict) else None
        if isinstance(size, int) and size > 0:
            return size
    return None


def tokenizer_vocab_size(text: str) -> int | None:
    """1 + the largest id a tokenizer.json knows (its model vocabulary and added tokens)."""
    try:
        tok = json.loads(text)
    except ValueError:
        return None
    ids = [i for i in ((tok.get("model") or {}).get("vocab") or {}).values() if isinstance(i, int)]
    ids += [t["id"] for t in tok.get("added_tokens") or [] if isinstance(t.get("id"), int)]
    return max(ids) + 1 if ids else None


def model_vocab_size(read: Callable[[str], str | None], model: str) -> int | None:
    """The smaller of config.json's and tokenizer.json's sizes in the folder `model`, read with
    `read(path) -> text or None`; None when neither file is there."""
    sizes = []
    for name, parse in (("config.json", config_vocab_size), ("tokenizer.json", tokenizer_vocab_size)):
        text = read(f"{model.rstrip('/')}/{name}")
        size = parse(text) if text else None
        if size:
            sizes.append(size)
    return min(sizes) if sizes else None


def local_vocab_size(model: str) -> int | None:
    """model_vocab_size of a folder on this machine (`sweeper load --model /path`)."""
    from pathlib import Path

    def read(path: str) -> str | None:
        file = Path(path)
        return file.read_text() if file.is_file() else None
    return model_vocab_size(read, model)
