"""`sweeper profile` as a user runs it, on the simulator: the config relaunched, profiled under
load, its traces saved and parsed, and the printed split matching the performance model."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from pathlib import Path

import optuna
import pytest
import yaml

from sweeper.hosts.procfs import live_group_members
from sweeper.sim.config import SimConfig
from sweeper.sim.perf import (
    PREFILL_PER_TOKEN_MS, attention_factor, moe_factor, prefill_time_ms, step_breakdown_ms,
)
from sweeper.sim.profiler import DENSE_GEMM_FRACTION
from tests.support.spaces import ONE_SEED_SPACE
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

INPUT_LEN, OUTPUT_LEN, C = 64, 16, 4
PROFILE_SPACE = f"""\
name: prof
engine: sim
model: deepseek-ai/DeepSeek-V4-Flash
fixed_flags: {{--time-scale: 0.01, --load-seconds: 20, --tp-size: 8, --mem-fraction-static: 0.7}}
parameters:
  ep_size: {{type: categorical, choices: [1, 8], flag: --ep-size}}
  moe_runner_backend: {{type: categorical, choices: [marlin, flashinfer_mxfp4], flag: --moe-runner-backend}}
  attention_backend: {{type: categorical, choices: [triton, torch_native], flag: --attention-backend}}
seeds:
  - name: baseline
    params: {{ep_size: 1, moe_runner_backend: marlin, attention_backend: triton}}
  - name: ep8-native
    params: {{ep_size: 8, moe_runner_backend: flashinfer_mxfp4, attention_backend: torch_native}}
reference: baseline
workload: {{input_len: {INPUT_LEN}, output_len: {OUTPUT_LEN}, concurrency: [{C}], min_rounds: 2, warmup_rounds: 1}}
budget: {{trials: 2}}
launch: {{ready_timeout_s: 60, stall_timeout_s: 5, stop_grace_s: 5}}
"""


def modelled_split(cfg: SimConfig, batch: int, input_len: int, output_len: int) -> dict[str, float]:
    """The performance model's GPU time per group over one closed-loop round (a prefill of the
    batch, then output_len-1 decode steps), as shares; the launch overhead is idle, not a kernel."""
    step, steps, tokens = step_breakdown_ms(cfg, batch), output_len - 1, batch * input_len
    pre_attention = tokens * PREFILL_PER_TOKEN_MS * 0.6 * attention_factor(cfg)
    pre_moe = tokens * PREFILL_PER_TOKEN_MS * 0.4 * moe_factor(cfg)
    pre_fixed = prefill_time_ms(cfg, tokens) - pre_attention - pre_moe
    ms = {"attention": steps * step["attention"] + pre_attention,
          "moe_gemm": steps * (step["moe"] + DENSE_GEMM_FRACTION * step["dense"]) + pre_moe + DENSE_GEMM_FRACTION * pre_fixed,
          "communication": steps * step["communication"],
          "other": (1 - DENSE_GEMM_FRACTION) * (steps * step["dense"] + pre_fixed)}
    total = sum(ms.values())
    return {group: value / total for group, value in ms.items()}


CONFIGS = {
    0: SimConfig(tp_size=8, ep_size=1, moe_runner_backend="marlin", attention_backend="triton", mem_fraction_static=0.7),
    1: SimConfig(tp_size=8, ep_size=8, moe_runner_backend="flashinfer_mxfp4", attention_backend="torch_native",
                 mem_fraction_static=0.7),
}


def printed_groups(stdout: str) -> list[tuple[str, float]]:
    rows = re.findall(r"^(attention|MoE/GEMM|communication|other)\s+([\d.]+)%", stdout, re.M)
    return [(name, float(share) / 100) for name, share in rows]


def test_profile_of_two_configs_shows_the_models_split(cli):
    (cli.workdir / "prof.yaml").write_text(PROFILE_SPACE)
    sweep = cli.run("sweep", "prof.yaml", "--study", "p", timeout=300)
    assert sweep.returncode == 0, sweep.stderr
    labels = {"attention": "attention", "MoE/GEMM": "moe_gemm", "communication": "communication", "other": "other"}
    for number, cfg in CONFIGS.items():
        result = cli.run("profile", "p", "--trial", str(number), "--seconds", "2", timeout=300)
        assert result.returncode == 0, result.stderr
        expected = modelled_split(cfg, C, INPUT_LEN, OUTPUT_LEN)
        groups = printed_groups(result.stdout)
        assert len(groups) == 4, result.stdout
        top_label, top_share = groups[0]
        assert labels[top_label] == max(expected, key=expected.get) == "attention"
        assert top_share == pytest.approx(expected["attention"], abs=0.03), result.stdout
        folder = cli.workdir / "results" / "p" / "trials" / str(number) / "profile"
        record = json.loads((folder / "profile.json").read_text())
        assert {g["group"]: g["share"] for g in record["groups"]} == pytest.approx(expected, abs=0.03)
        assert record["source"] == "gpu_kernels" and record["devices"] == 8 and record["traces"] == 8
        assert record["concurrency"] == C and record["load"]["failed"] == 0 and record["load"]["seconds"] >= 2
        # Idle GPU time is the launch overhead and the client's turnaround between rounds: a few %.
        assert len(record["gpu_busy"]) == 8 and all(0.9 < d["busy_share"] < 1 for d in record["gpu_busy"])
        assert "GPU busy: " in result.stdout
        assert (folder / "profile.txt").read_text() in result.stdout
        assert len(record["trace_files"]) == 8 and all((folder / f).is_file() for f in record["trace_files"])
        # the relaunch is recorded like a trial's, and nothing of it is left running
        process = json.loads((folder / "process.json").read_text())
        assert live_group_members(process["pgid"]) == []
        assert json.loads((folder / "stop.json").read_text())["was_running"] is True
        assert (cli.workdir / "results" / "p" / "trials" / str(number) / "server.log").is_file()  # the trial's own
    # the two configs differ where the model says they do
    one, two = modelled_split(CONFIGS[0], C, INPUT_LEN, OUTPUT_LEN), modelled_split(CONFIGS[1], C, INPUT_LEN, OUTPUT_LEN)
    assert abs(one["attention"] - two["attention"]) > 0.05 and two["communication"] > one["communication"]
    study = optuna.load_study(study_name="p", storage=f"sqlite:///{cli.workdir / 'results' / 'p' / 'study.db'}")
    assert study.user_attrs.get("profile_server") is None
    for number, cfg in CONFIGS.items():  # the summary the study keeps, for reports without the files
        kept = study.user_attrs[f"profile:{number}"]
        assert kept["groups"] == pytest.approx(modelled_split(cfg, C, INPUT_LEN, OUTPUT_LEN), abs=0.03)
        assert kept["top_kernels"][0]["group"] == "attention" and kept["concurrency"] == C


@pytest.fixture
def one_trial_study(cli):
    space = yaml.safe_load(ONE_SEED_SPACE)
    space["budget"] = {"trials": 1}
    (cli.workdir / "one.yaml").write_text(yaml.safe_dump(space))
    assert cli.run("sweep", "one.yaml", "--study", "s", timeout=300).returncode == 0
    return cli


def profiling_server(workdir) -> dict | None:
    """The process.json of the profile's server once the profiler is on (its log says so)."""
    folder = workdir / "results" / "s" / "trials" / "0" / "profile"
    try:  # the folder may be mid-replacement by a new profile
        if "Profiling starts" in (folder / "server.log").read_text():
            return json.loads((folder / "process.json").read_text())
    except (OSError, ValueError):
        pass
    return None


def test_interrupted_profile_stops_its_server_and_a_killed_one_is_cleaned_up_next_time(one_trial_study):
    cli = one_trial_study
    storage = f"sqlite:///{cli.workdir / 'results' / 's' / 'study.db'}"
    # SIGTERM (as Ctrl-C): the server is stopped before the command exits.
    controller = cli.start("profile", "s", "--trial", "0", "--seconds", "60")
    try:
        process = wait_for(lambda: profiling_server(cli.workdir), timeout=120)
        assert live_group_members(process["pgid"])
        os.kill(controller.pid, signal.SIGTERM)
        assert controller.wait(60) == 130
    finally:
        if controller.poll() is None:
            controller.kill()
    assert "the profiled server was stopped" in controller.stderr.read()
    assert live_group_members(process["pgid"]) == []
    assert optuna.load_study(study_name="s", storage=storage).user_attrs.get("profile_server") is None

    # SIGKILL: nothing can run; the server is recorded and the next profile stops it first.
    first_pgid = process["pgid"]
    controller = cli.start("profile", "s", "--trial", "0", "--seconds", "60")
    try:
        process = wait_for(lambda: (p := profiling_server(cli.workdir)) and p["pgid"] != first_pgid and p,
                           timeout=120)
        os.kill(controller.pid, signal.SIGKILL)
        controller.wait(10)
        assert live_group_members(process["pgid"])  # its own session: it outlives the controller
        recorded = optuna.load_study(study_name="s", storage=storage).user_attrs["profile_server"]
        assert recorded["pgid"] == process["pgid"]
        again = cli.run("profile", "s", "--trial", "0", "--seconds", "1", timeout=300)
        assert again.returncode == 0, again.stderr
        assert f"stopped the server an interrupted profile left (pgid {process['pgid']})" in again.stderr
        assert live_group_members(process["pgid"]) == []
    finally:
        if live_group_members(process["pgid"]):
            os.killpg(process["pgid"], signal.SIGKILL)


def test_profile_refuses_bad_requests_before_launching_anything(one_trial_study):
    cli = one_trial_study
    neither = cli.run("profile", "s")
    assert neither.returncode == 2 and "--trial N or --best" in neither.stderr
    missing = cli.run("profile", "s", "--trial", "7")
    assert missing.returncode == 2 and "no trial 7" in missing.stderr
    nostudy = cli.run("profile", "nope", "--best")
    assert nostudy.returncode == 2 and "no study 'nope'" in nostudy.stderr
    assert not (cli.workdir / "results" / "s" / "trials" / "0" / "profile").exists()


def test_profile_over_ssh_fetches_the_traces(ssh_cli):
    cli = ssh_cli
    assert cli.run("sweep", "one-seed.yaml", "--host", "box", "--study", "r", "--trials", "1", timeout=300).returncode == 0
    result = cli.run("profile", "r", "--best", "--seconds", "1", timeout=300)
    assert result.returncode == 0, result.stderr
    assert printed_groups(result.stdout)[0][0] == "attention"
    [best] = cli.outcomes("r")  # the trial that measured
    local = cli.workdir / "results" / "r" / "trials" / str(best) / "profile"
    remote = cli.remote_work / "r" / str(best) / "profile"
    record = json.loads((local / "profile.json").read_text())
    assert record["trial"] == best and record["host"] == "box" and record["traces"] == 8
    remote_traces = sorted((remote / "traces").glob("*-TP-*.trace.json.gz"))
    assert len(remote_traces) == 8
    for path in remote_traces:  # copied through the SSH connection, byte for byte
        assert (local / "traces" / path.name).read_bytes() == path.read_bytes()
    process = json.loads((local / "process.json").read_text())
    assert process["log_path"] == str(remote / "server.log") and live_group_members(process["pgid"]) == []
    assert "The server is fired up" in (local / "server.log").read_text()  # mirrored from the host


def test_kernels_reads_saved_traces(cli, tmp_path):
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "profile" / "h200_llama4l_probe.pt.trace.json.gz"
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank in range(2):
        shutil.copy(fixture, folder / f"1.0-TP-{rank}.trace.json.gz")
    result = cli.run("kernels", str(fixture), "--top", "3", "--json-file", "one.json")
    assert result.returncode == 0, result.stderr
    assert "in 1 trace file(s)" in result.stdout and "nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN" in result.stdout
    one = json.loads((cli.workdir / "one.json").read_text())
    both = cli.run("kernels", str(folder), "--json-file", "two.json")
    assert both.returncode == 0 and "summed over 2 GPU(s) in 2 trace file(s)" in both.stdout
    two = json.loads((cli.workdir / "two.json").read_text())
    assert two["total_us"] == pytest.approx(2 * one["total_us"])
    assert [g["share"] for g in two["groups"]] == pytest.approx([g["share"] for g in one["groups"]])
    bad = cli.run("kernels", "hosts.yaml")
    assert bad.returncode == 2 and "hosts.yaml: not a readable chrome trace" in bad.stderr


def test_a_server_dying_under_the_profiler_is_an_error_and_its_group_is_cleaned(one_trial_study):
    cli = one_trial_study
    controller = cli.start("profile", "s", "--trial", "0", "--seconds", "60")
    try:
        process = wait_for(lambda: profiling_server(cli.workdir), timeout=120)
        os.kill(process["pid"], signal.SIGKILL)  # the main process only: its scheduler children stay
        assert controller.wait(120) == 2
    finally:
        if controller.poll() is None:
            controller.kill()
    stderr = controller.stderr.read()
    assert "the server exited during the profile" in stderr, stderr
    assert live_group_members(process["pgid"]) == []  # the children were stopped with the group
    folder = cli.workdir / "results" / "s" / "trials" / "0" / "profile"
    assert json.loads((folder / "stop.json").read_text())["was_running"] is True  # children were left
    assert not (folder / "profile.json").exists()
