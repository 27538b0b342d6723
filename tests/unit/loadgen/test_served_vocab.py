"""Prompt token ids stay inside the served model's vocabulary. On the H200, vLLM 0.24.0 refused
every request of a 16,384-token model ("Token id 31647 is out of vocabulary", inside an HTTP 200
stream: tests/fixtures/vllm/sse_out_of_vocab.jsonl shows the same refusal for id 40000 of a
32,000-token model) because the load generator drew ids from [100, 32000) whatever the model."""

import json
from pathlib import Path

from sweeper.hosts.base import CommandResult
from sweeper.loadgen.ladder import LoadPlan, build_prompts
from sweeper.loadgen.vocab import config_vocab_size, local_vocab_size, model_vocab_size, tokenizer_vocab_size
from sweeper.loadgen.client import StreamOptions
from sweeper.loadgen.endpoints import RequestDialect
from sweeper.trial.load_ladder import build_level_prompts, served_vocab_size
from tests.support.paths import FIXTURE_DIR

FIXTURES = FIXTURE_DIR / "vllm"


def write_model(folder: Path, config_vocab: int, tokenizer_ids: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3_moe", "vocab_size": config_vocab}))
    vocab = {f"t{i}": i for i in range(tokenizer_ids - 3)}
    added = [{"id": tokenizer_ids - 3 + k, "content": s, "special": True}
             for k, s in enumerate(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])]
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": vocab}, "added_tokens": added}))
    return folder


class FolderHost:
    """The host's file reads, as `cat` answers them."""

    def run(self, argv, env=None, timeout_s=120.0):
        path = Path(argv[-1])
        if not path.is_file():
            return CommandResult(tuple(argv), 1, "", f"cat: {path}: No such file or directory")
        return CommandResult(tuple(argv), 0, path.read_text(), "")


def test_the_real_refusal_is_what_ids_outside_the_vocabulary_get():
    reads = [json.loads(line) for line in (FIXTURES / "sse_out_of_vocab.jsonl").read_text().splitlines()]
    assert "is out of vocabulary" in reads[1]["b"]


def test_sizes_from_config_and_tokenizer_files(tmp_path):
    folder = write_model(tmp_path / "m", 16_384, 16_384)
    assert config_vocab_size((folder / "config.json").read_text()) == 16_384
    assert config_vocab_size('{"text_config": {"vocab_size": 151936}}') == 151_936
    assert tokenizer_vocab_size((folder / "tokenizer.json").read_text()) == 16_384
    assert config_vocab_size("not json") is None and tokenizer_vocab_size("{}") is None
    # the smaller of the two: ids valid for the embedding and the tokenizer alike
    assert local_vocab_size(str(write_model(tmp_path / "padded", 32_000, 16_384))) == 16_384
    assert local_vocab_size(str(tmp_path / "absent")) is None
    assert model_vocab_size(lambda path: None, "Qwen/Qwen3-30B-A3B") is None


def test_trial_prompts_stay_below_the_served_models_vocabulary(tmp_path):
    """Before: ids up to 31,999 for a 16,384-token model (every request refused)."""
    folder = write_model(tmp_path / "sweeper-model", 16_384, 16_384)
    vocab = served_vocab_size(FolderHost(), str(folder))
    assert vocab == 16_384
    prompts = build_level_prompts(64, 64, seed=0, dialect=RequestDialect(), vocab_size=vocab)
    assert max(max(p) for p in prompts) < 16_384
    assert min(min(p) for p in prompts) >= 100
    # a hub name (no folder on the host): the old range, unchanged
    assert served_vocab_size(FolderHost(), "Qwen/Qwen3-30B-A3B") is None
    assert max(max(p) for p in build_level_prompts(64, 64, 0, RequestDialect())) >= 16_384


def test_sweeper_load_plan_respects_the_vocabulary():
    plan = LoadPlan(input_len=64, vocab_size=16_384, options=StreamOptions())
    assert max(max(p) for p in build_prompts(plan, 64, seed=1)) < 16_384
