"""A sweep whose workload is a dataset with shared prefixes and drawn output lengths, against
real simulator processes: each level's record holds the cache flush, the hit rate read from the
server's /metrics and the prompt token counts of its /tokenize."""

from __future__ import annotations

import json

import pytest

from tests.support.spaces import ONE_SEED_SPACE

pytestmark = pytest.mark.slow

WORKLOAD = """\
workload:
  dataset: data/prompts.jsonl
  output_len: {dist: uniform, min: 16, max: 40}
  shared_prefix: {tokens: 64, groups: 2}
  concurrency: [1, 4]
"""


def test_a_sweep_on_a_dataset_with_shared_prefixes_records_the_cache_per_level(cli):
    prompts = [{"prompt": " ".join(f"w{i}x{k}" for k in range(20 + i))} for i in range(12)]
    (cli.workdir / "data").mkdir()
    (cli.workdir / "data" / "prompts.jsonl").write_text("\n".join(json.dumps(p) for p in prompts) + "\n")
    space = (ONE_SEED_SPACE.replace("{--time-scale: 0.01, --load-seconds: 30}",
                                    "{--time-scale: 0.01, --load-seconds: 30, --enable-metrics: true}")
             .replace("workload: {input_len: 64, output_len: 32, concurrency: [1, 4], min_rounds: 2, warmup_rounds: 1}\n",
                      WORKLOAD)
             .replace("budget: {trials: 5}", "budget: {trials: 1}"))
    assert WORKLOAD in space
    (cli.workdir / "ds.yaml").write_text(space)
    result = cli.run("sweep", "ds.yaml", "--study", "ds")
    assert result.returncode == 0, result.stderr
    [(number, outcome)] = cli.outcomes("ds").items()  # the trial that measured (its infra-fault tries left out)
    levels = outcome["levels"]
    assert sorted(levels, key=int) == ["1", "4"], outcome.get("failure")
    for level in levels.values():
        assert level["failed"] == 0 and not any("fewer tokens" in r for r in level["invalid_reasons"])
        assert level["cache_flushed"] is True
        assert 0.3 < level["prefix_cache_hit_rate"] < 0.9  # the 64-token prefixes hit, the records do not
        assert level["prompt_tokens_counted"] == level["total_input_tokens"]
        assert level["prompt_tokens_counted_by"] == "engine /tokenize"
    log = (cli.workdir / f"results/ds/trials/{number}/server.log").read_text()
    assert log.count("Cache flushed successfully!") == 2
