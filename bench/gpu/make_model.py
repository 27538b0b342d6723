"""A random-weight Qwen3-MoE-shaped model and a locally trained byte-level BPE tokenizer, saved as a
Hugging Face folder that `transformers serve FOLDER` loads with no download.

    python3 bench/gpu/make_model.py /tmp/sweeper-model                    # ~0.46 B, 8 layers
    python3 bench/gpu/make_model.py /tmp/tiny --layers 2 --hidden 64 --experts 4 --dtype float32
    python3 bench/gpu/make_model.py /tmp/llama --arch llama --layers 16 --hidden 1536 \
        --vocab 24000 --pad-to 24064 --eos         # issue 29's held-out shape: a dense 0.6 B Llama

The generation config has no eos_token_id: `transformers serve` rejects `ignore_eos`, and a random
model would otherwise stop early now and then (about once per vocabulary-size tokens), so requests
run to max_tokens, as the load generator's length check expects.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

# Qwen's chat markup: `transformers serve` parses a qwen3_moe model's output with Qwen's response
# template, whose start anchor is "<|im_start|>assistant\n"; without it the prompt is streamed back
# as the first content chunk.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def made_up_corpus(seed: int, words: list[str], lines: int = 20_000) -> list[str]:
    """Seeded text: the load generator's common words mixed with invented syllable words, so the
    tokenizer learns one token for each common word and merges for the rest."""
    rng = random.Random(seed)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["th", "sh", "ng", "st"]
    invented = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(20_000)]
    pool = words * 40 + invented
    return [" ".join(rng.choice(pool) for _ in range(rng.randint(8, 40))) for _ in range(lines)]


def build_tokenizer(folder: Path, vocab_size: int, seed: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    words = (Path(__file__).resolve().parents[1] / "words.txt").read_text().split()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(made_up_corpus(seed, words), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|endoftext|>", eos_token="<|im_end|>",
                                   model_max_length=32_768)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(folder))
    return fast


def build_config(args: argparse.Namespace, vocab_size: int, pad_id: int, eos_id: int | None = None):
    from transformers import LlamaConfig, Qwen3MoeConfig

    heads = max(args.hidden // 64, 1)
    if args.arch == "llama":
        return LlamaConfig(
            vocab_size=vocab_size, hidden_size=args.hidden, num_hidden_layers=args.layers,
            num_attention_heads=heads, num_key_value_heads=max(heads // 4, 1), head_dim=args.hidden // heads,
            intermediate_size=args.hidden * 4, max_position_embeddings=4096, pad_token_id=pad_id,
            bos_token_id=None, eos_token_id=eos_id, tie_word_embeddings=False,
        )
    return Qwen3MoeConfig(
        vocab_size=vocab_size, hidden_size=args.hidden, num_hidden_layers=args.layers,
        num_attention_heads=heads, num_key_value_heads=max(heads // 4, 1), head_dim=args.hidden // heads,
        intermediate_size=args.hidden * 3, moe_intermediate_size=args.hidden // 2,
        num_experts=args.experts, num_experts_per_tok=min(args.active, args.experts),
        max_position_embeddings=4096, pad_token_id=pad_id, bos_token_id=None, eos_token_id=eos_id,
        tie_word_embeddings=False,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--arch", choices=("qwen3_moe", "llama"), default="qwen3_moe")
    parser.add_argument("--eos", action="store_true",
                        help="set the eos token (<|im_end|>): a server that honours ignore_eos runs to max_tokens anyway")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--experts", type=int, default=32)
    parser.add_argument("--active", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=16_384)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pad-to", type=int, default=0,
                        help="add special placeholder tokens until the vocabulary has this many (0: none); "
                             "they decode to empty text, as padded vocabularies' unused ids do")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(args.out, args.vocab, args.seed)
    if args.pad_to > len(tokenizer):
        tokenizer.add_tokens([f"<|unused_{i}|>" for i in range(args.pad_to - len(tokenizer))], special_tokens=True)
        tokenizer.save_pretrained(str(args.out))
    eos_id = tokenizer.eos_token_id if args.eos else None
    config = build_config(args, len(tokenizer), tokenizer.pad_token_id, eos_id)
    torch.manual_seed(args.seed)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):  # random init is faster there
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, args.dtype))
    model.generation_config = GenerationConfig(pad_token_id=tokenizer.pad_token_id, eos_token_id=eos_id,
                                               bos_token_id=None, do_sample=False)
    model.save_pretrained(str(args.out))
    params = sum(p.numel() for p in model.parameters())
    summary = {"arch": args.arch, "eos": eos_id, "params": params, "vocab": len(tokenizer), "layers": args.layers,
               "hidden": args.hidden,
               "experts": args.experts, "active": args.active, "dtype": args.dtype,
               "seconds": round(time.monotonic() - started, 1)}
    (args.out / "sweeper_model.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
