"""A sweep with `workload.precision` on the simulator: each level of the trial is precision-driven
(no warm-up run, sent until its CI is within the precision or a cap) and the study keeps the keys
the CI-aware leaderboard reads."""

from __future__ import annotations

import optuna

from tests.support.spaces import ONE_SEED_SPACE

FIXED = "workload: {input_len: 64, output_len: 32, concurrency: [1, 4], min_rounds: 2, warmup_rounds: 1}"
PRECISE = ("workload: {input_len: 64, output_len: 32, concurrency: [1, 4], precision: 0.5, max_requests: 400, "
           "max_client_lag_ms: 100}")
KEYS = ("output_throughput", "output_throughput_ci_low", "output_throughput_ci_high", "batches",
        "precision_reached", "warmup_dropped_s")


def test_a_precise_sweep_records_each_levels_ci(cli):
    assert FIXED in ONE_SEED_SPACE
    (cli.workdir / "p.yaml").write_text(ONE_SEED_SPACE.replace(FIXED, PRECISE))
    result = cli.run("sweep", "p.yaml", "--study", "p", "--trials", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    storage = f"sqlite:///{cli.workdir / 'results' / 'p' / 'study.db'}"
    [summary] = optuna.get_all_study_summaries(storage)
    done = [t for t in optuna.load_study(study_name=summary.study_name, storage=storage).trials
            if t.state == optuna.trial.TrialState.COMPLETE]
    assert done, "no trial completed (a busy machine's client faults are queued again, never the config's)"
    for level in done[-1].user_attrs["levels"].values():
        assert all(level.get(k) is not None for k in KEYS), level
        assert level["precision_reached"] is True and level["stopped_by"] == "precision"
        assert level["output_throughput_ci_low"] <= level["output_throughput"] <= level["output_throughput_ci_high"]
