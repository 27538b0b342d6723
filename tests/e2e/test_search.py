"""Search features through the CLI, on real simulator processes."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.support.cli import check_failures_retried

pytestmark = pytest.mark.slow

RULED = """\
name: ruled
engine: sim
model: deepseek-ai/DeepSeek-V4-Flash
fixed_flags: {--time-scale: 0.03, --load-seconds: 20}
parameters:
  tp_size: {type: categorical, choices: [4, 8], flag: --tp-size}
  moe_runner_backend: {type: categorical, choices: [marlin, triton], flag: --moe-runner-backend}
derived:
  ep_size: {expr: tp_size, flag: --ep-size}
rules:
  - forbid: "moe_runner_backend not in ['marlin', 'flashinfer_mxfp4']"
    reason: "FP4 experts need moe_runner_backend in [marlin, flashinfer_mxfp4]"
workload: {input_len: 32, output_len: 16, concurrency: [1, 4], min_rounds: 2, warmup_rounds: 1}
budget: {trials: 2}
launch: {ready_timeout_s: 60, stall_timeout_s: 5, stop_grace_s: 5}
"""


def leaderboard_csv(cli, study: str) -> pd.DataFrame:
    """The study's leaderboard as `leaderboard --csv` writes it."""
    cli.run("leaderboard", study, "--csv", f"{study}.csv")
    return pd.read_csv(cli.workdir / f"{study}.csv")


def test_rules_cost_no_launch_and_derived_values_reach_the_server(cli):
    (cli.workdir / "ruled.yaml").write_text(RULED)
    # 4 configs, 2 of them ruled out: brute force runs out of configs before 3 evaluations
    result = cli.run("sweep", "ruled.yaml", "--study", "r1", "--sampler", "brute", "--trials", "3")
    assert result.returncode == 0, result.stderr
    frame = assert_refused_without_launch(cli, "r1", "triton", "rule")
    check_failures_retried(cli.study("r1").trials)  # a busy machine's infra fault runs again
    launched = frame[(frame["param_moe_runner_backend"] == "marlin") & (frame["state"] == "COMPLETE")]
    assert len(launched) == 2 and launched["feasible"].all()
    assert sorted(launched["param_ep_size"]) == [4, 8]  # derived = tp_size
    for number in launched["trial"]:
        argv = json.loads((cli.workdir / f"results/r1/trials/{number}/argv.json").read_text())
        assert argv[argv.index("--ep-size") + 1] == argv[argv.index("--tp-size") + 1]


def test_slo_breaks_stop_the_ladder_and_mark_the_config_infeasible(cli):
    space = RULED.replace("budget: {trials: 2}", "budget: {trials: 1}\nslo: {p99_ttft_ms: 1}").replace(
        "choices: [marlin, triton]", "choices: [marlin]").replace("choices: [4, 8]", "choices: [8]")
    (cli.workdir / "slo.yaml").write_text(space)
    result = cli.run("sweep", "slo.yaml", "--study", "s1", "--sampler", "brute")
    assert result.returncode == 0, result.stderr
    outcome = json.loads(next((cli.workdir / "results/s1/trials").glob("*/outcome.json")).read_text())
    assert outcome["failure"]["kind"] == "slo"
    assert list(outcome["levels"]) == ["1"]  # C=4 was never run


def test_dedupe_holds_across_resume(cli):
    (cli.workdir / "ruled.yaml").write_text(RULED.replace("choices: [marlin, triton]", "choices: [marlin]"))
    assert cli.run("sweep", "ruled.yaml", "--study", "d1", "--trials", "1", "--sampler", "random").returncode == 0
    result = cli.run("resume", "d1", "--trials", "2")
    assert result.returncode == 0, result.stderr
    frame = leaderboard_csv(cli, "d1")
    launched = frame[frame["duplicate_of"].isna()]
    assert sorted(launched["param_tp_size"]) == [4, 8]  # each config measured once, over two runs


ABLATE = """\
name: abl
engine: sim
model: deepseek-ai/DeepSeek-V4-Flash
fixed_flags: {--time-scale: 0.03, --load-seconds: 20}
parameters:
  tp_size: {type: categorical, choices: [8], flag: --tp-size}
  ep_size: {type: categorical, choices: [1, 8], flag: --ep-size}
  moe_a2a_backend: {type: categorical, choices: [none, deepep], flag: --moe-a2a-backend}
  nccl_proto: {type: categorical, choices: [Simple, LL], env: NCCL_PROTO}
seeds:
  - name: base
    params: {tp_size: 8, ep_size: 1, moe_a2a_backend: none, nccl_proto: Simple}
workload: {input_len: 64, output_len: 16, concurrency: [16], min_rounds: 2, warmup_rounds: 1}
launch: {ready_timeout_s: 60, stall_timeout_s: 5, stop_grace_s: 5}
"""


def test_ablation_finds_the_lever_the_model_says_matters_most(cli):
    """The model: ep=8 is worth ~14% at C=16, NCCL_PROTO ~0.1%, deepep crashes."""
    (cli.workdir / "abl.yaml").write_text(ABLATE)
    result = cli.run("ablate", "abl.yaml", "--baseline", "base", "--repeats", "3", "--study", "a1")
    assert result.returncode == 0, result.stderr
    import optuna

    study = optuna.load_study(study_name="a1", storage=f"sqlite:///{cli.workdir}/results/a1/study.db")
    rows = {row["lever"]: row for row in study.user_attrs["ablation"]}
    assert rows["ep_size=8"]["verdict"] == "helps" and 8 < rows["ep_size=8"]["delta_pct"] < 22
    assert rows["moe_a2a_backend=deepep"]["verdict"] == "breaks"
    assert rows["nccl_proto=LL"]["verdict"] == "within noise" or abs(rows["nccl_proto=LL"]["delta_pct"]) < 3
    assert study.user_attrs["ablation"][0]["lever"] == "ep_size=8"  # the top of the ledger
    assert "ep_size=8" in result.stdout and "helps" in result.stdout


def test_validate_reruns_the_finalists_and_declares_a_winner_with_its_ci(cli):
    (cli.workdir / "abl.yaml").write_text(ABLATE)
    assert cli.run("sweep", "abl.yaml", "--study", "v1", "--sampler", "brute", "--trials", "4").returncode == 0
    result = cli.run("validate", "v1", "--top", "2", "--repeats", "2")
    assert result.returncode == 0, result.stderr
    assert "winner: trial" in result.stdout and "95% CI" in result.stdout


def test_flags_the_installed_engine_lacks_cost_no_launch(cli):
    """The simulator's own --help is the flag table: a choice it lacks is refused before launch,
    and a fixed flag it lacks stops the sweep at once with the replacement named."""
    space = RULED.replace("choices: [marlin, triton]", "choices: [marlin, humming]").replace(
        "  - forbid: \"moe_runner_backend not in ['marlin', 'flashinfer_mxfp4']\"\n"
        "    reason: \"FP4 experts need moe_runner_backend in [marlin, flashinfer_mxfp4]\"\n", "")
    space = space.replace("rules:\n", "")
    (cli.workdir / "flags.yaml").write_text(space)
    result = cli.run("sweep", "flags.yaml", "--study", "f1", "--sampler", "brute", "--trials", "3")
    assert result.returncode == 0, result.stderr
    assert_refused_without_launch(cli, "f1", "humming", "unsupported_flag")

    (cli.workdir / "fixed.yaml").write_text(space.replace("--load-seconds: 20}", "--load-seconds: 20, --enable-dp-attention: true}"))
    result = cli.run("sweep", "fixed.yaml", "--study", "f2")
    assert result.returncode == 2
    assert "--enable-dp-attention is not a flag of the installed engine; use --attn-dp-size" in result.stderr


def assert_refused_without_launch(cli, study: str, backend: str, kind: str):
    """Both configs with this MoE backend failed as `kind`, none ever launched; the leaderboard."""
    frame = leaderboard_csv(cli, study)
    refused = frame[frame["param_moe_runner_backend"] == backend]
    assert len(refused) == 2 and set(refused["failure_kind"]) == {kind}
    for number in refused["trial"]:
        assert not (cli.workdir / f"results/{study}/trials/{number}/server.log").exists()
    return frame
