"""Build a small word-level tokenizer and save it in Hugging Face format (tokenizer.json +
tokenizer_config.json), so guidellm can load it from a local folder with HF_HUB_OFFLINE=1.

    /tmp/benchvenv/bin/python bench/make_tokenizer.py /tmp/bench-tokenizer
"""

from __future__ import annotations

import sys
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, trainers


def build(folder: Path) -> None:
    words = (Path(__file__).with_name("words.txt")).read_text().split()
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    corpus = [" ".join(words[i:] + words[:i]) for i in range(0, len(words), 7)]
    tok.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[PAD]", "[EOS]"]))
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                   eos_token="[EOS]", model_max_length=1_000_000)
    folder.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(folder))


if __name__ == "__main__":
    build(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/bench-tokenizer"))
