"""The flag history (sweeper/engines/versions.py) against the captured `--help` of each release, and
the flag check refusing removed flags and missing choices before launch, naming the replacement."""

import re

import pytest

from sweeper.spec.hosts import HostSpec
from sweeper.spec.space_file import parse_space
from sweeper.engines import get_engine
from sweeper.engines.flags import flag_problems, parse_help_flags
from sweeper.engines.versions import FLAG_CHANGES, deprecation_warnings, parse_version
from tests.support.paths import FIXTURE_DIR

HELP = FIXTURE_DIR / "help"
SGLANG_VERSIONS = ("0.5.9", "0.5.16", "0.5.20", "0.5.23")


def help_flags(name: str) -> dict:
    return parse_help_flags((HELP / f"{name}.txt").read_text())


VLLM_HELP = {"0.24.0": HELP / "vllm-0.24.0.txt",
             "0.33.0": HELP / "vllm-0.33.0.txt"}


@pytest.mark.parametrize("change", [c for c in FLAG_CHANGES if c.engine == "vllm"], ids=lambda c: c.describe())
def test_every_vllm_row_is_true_of_the_captured_help_texts(change):
    """vLLM 0.24.0 (captured on the H200) and 0.33.0: an added flag or choice absent in the older,
    present in the newer; a removed one the reverse."""
    for version, path in VLLM_HELP.items():
        flags = parse_help_flags(path.read_text())
        present = change.flag in flags and (change.value is None or change.value in (flags[change.flag] or []))
        after = parse_version(version) >= parse_version(change.version)
        assert present == (after if change.change == "added" else not after), version


def test_a_024_spelling_refused_by_033_names_its_replacement():
    flags = parse_help_flags(VLLM_HELP["0.33.0"].read_text())
    problems = flag_problems(["--no-enable-chunked-prefill"], flags, False, "vllm")
    assert problems and "use --disable-chunked-prefill (--no-enable-chunked-prefill removed in vLLM 0.33.0)" in problems[0]


@pytest.mark.parametrize("change", [c for c in FLAG_CHANGES if c.engine == "sglang"], ids=lambda c: c.describe())
def test_every_sglang_row_is_true_of_the_captured_help_texts(change):
    """A flag (or choice) added in X is absent before X and present from X on; a removed one the
    reverse; a deprecated one is still accepted from X on (and says so in its help)."""
    changed = parse_version(change.version)
    for version in SGLANG_VERSIONS:
        flags = help_flags(f"sglang-{version}")
        present = change.flag in flags and (change.value is None or change.value in (flags[change.flag] or []))
        after = parse_version(version) >= changed
        if change.change == "added":
            assert present == after, version
        elif change.change == "removed":
            assert present != after, version
        else:  # deprecated: still there, and its help text says so
            assert present, version
    if change.change == "deprecated":
        text = (HELP / f"sglang-{SGLANG_VERSIONS[-1]}.txt").read_text()
        start = re.search(rf"\n  {re.escape(change.flag)}(?=[ ,\n])", text).start()
        block = text[start:start + 400]
        assert "deprecated" in block.lower(), block


def test_vllm_help_has_the_flags_the_adapter_and_spaces_use():
    flags = help_flags("vllm-0.33.0")
    for flag in ("--tensor-parallel-size", "--data-parallel-size", "--enable-expert-parallel",
                 "--gpu-memory-utilization", "--enforce-eager", "--max-num-seqs", "--max-num-batched-tokens",
                 "--compilation-config", "--kv-cache-dtype", "--load-format", "--host", "--port"):
        assert flag in flags, flag
    assert "allgather_reducescatter" in flags["--all2all-backend"] and "naive" in flags["--all2all-backend"]
    assert "marlin" in flags["--moe-backend"] and "auto" in flags["--moe-backend"]


CUDA_GRAPH_SPACE = parse_space("""\
name: old-flags
engine: sglang
model: deepseek-ai/DeepSeek-V4-Flash
parameters:
  cuda_graph_max_bs: {type: categorical, choices: [16, 32], flag: --cuda-graph-max-bs}
  moe_runner_backend: {type: categorical, choices: [marlin, flashinfer_mxfp4], flag: --moe-runner-backend}
""", "inline")


def refusal(version: str, config: dict) -> list[str]:
    spec = get_engine("sglang").build_launch_spec(CUDA_GRAPH_SPACE, config, HostSpec(transport="local"), 30000, "python")
    return flag_problems(spec.argv, help_flags(f"sglang-{version}"), engine="sglang")


def test_a_removed_flag_is_refused_with_its_replacement_named():
    config = {"cuda_graph_max_bs": 16, "moe_runner_backend": "flashinfer_mxfp4"}
    assert refusal("0.5.16", config) == []  # still an alias of --cuda-graph-max-bs-decode there
    for version in ("0.5.20", "0.5.23"):
        assert refusal(version, config) == [
            "--cuda-graph-max-bs is not a flag of the installed engine; use --cuda-graph-max-bs-decode / "
            "--cuda-graph-max-bs-prefill (--cuda-graph-max-bs removed in SGLang 0.5.20)"]


def test_a_choice_the_old_release_lacks_is_refused_with_the_release_that_added_it():
    problems = refusal("0.5.9", {"cuda_graph_max_bs": 16, "moe_runner_backend": "marlin"})
    assert len(problems) == 1
    assert problems[0].startswith("--moe-runner-backend marlin: not one of the installed engine's choices (auto, ")
    assert problems[0].endswith("; --moe-runner-backend marlin added in SGLang 0.5.16: the installed version is older")


def test_deprecated_flags_warn_only_from_their_release():
    argv = ["--enable-dp-attention", "--disable-cuda-graph", "--tp-size", "8"]
    assert deprecation_warnings(argv, "sglang", "0.5.9") == []
    assert deprecation_warnings(argv, "sglang", "0.5.20") == [
        "--disable-cuda-graph is deprecated (--disable-cuda-graph deprecated in SGLang 0.5.16); "
        "use --cuda-graph-backend-decode disabled"]
    assert len(deprecation_warnings(argv, "sglang", "sglang 0.5.23.post1")) == 2


def test_version_texts():
    assert parse_version("0.5.23") == (0, 5, 23) and parse_version("0.5.23-sim") == (0, 5, 23)
    assert parse_version("vllm 0.33.0rc1") == (0, 33, 0) and parse_version("?") == ()


def test_run_trial_refuses_a_removed_flag_before_anything_is_launched(tmp_path):
    """The pipeline itself: SGLang 0.5.23's --help, a space still using --cuda-graph-max-bs."""
    from sweeper.hosts.local import LocalHost
    from sweeper.trial.context import TrialContext
    from sweeper.trial.pipeline import run_trial

    host = LocalHost("local", HostSpec(transport="local", gpu_gate="off", base_port=36000))
    try:
        ctx = TrialContext(space=CUDA_GRAPH_SPACE, engine=get_engine("sglang"), host=host, host_spec=host.spec,
                           trial_dir=tmp_path / "t", known_flags=help_flags("sglang-0.5.23"))
        outcome = run_trial(ctx, {"cuda_graph_max_bs": 16, "moe_runner_backend": "marlin"})
    finally:
        host.close()
    assert (outcome.failure.stage, outcome.failure.kind) == ("preflight", "unsupported_flag")
    assert "use --cuda-graph-max-bs-decode" in outcome.failure.message
    assert not outcome.launched and not (tmp_path / "t" / "process.json").exists()


def test_the_version_probe_runs_on_the_host_and_names_the_installed_release():
    """The probe is the cache key of the flag table: run it for real (the simulator's package)."""
    import sys

    import sweeper
    from sweeper.hosts.local import LocalHost

    host = LocalHost("local", HostSpec(transport="local", gpu_gate="off"))
    try:
        result = host.run(get_engine("sim").version_argv(sys.executable), timeout_s=60)
        missing = host.run(get_engine("vllm").version_argv(sys.executable), timeout_s=60)
    finally:
        host.close()
    assert result.returncode == 0 and result.stdout.strip() == sweeper.__version__
    assert missing.returncode != 0 and "vllm" in missing.stderr  # not installed here: a clear error


def test_the_study_reads_the_help_once_per_version_and_keeps_deprecation_warnings(tmp_path):
    """installed_flags against an interpreter shim that answers like SGLang 0.5.23 would (its
    captured --help and its version): no sglang can be installed here."""
    import optuna

    from sweeper.hosts.local import LocalHost
    from sweeper.study.store import installed_flags

    shim = tmp_path / "python"
    shim.write_text(f"""#!/bin/sh
case "$*" in
  *--help*) cat {HELP / 'sglang-0.5.23.txt'} ;;
  *importlib.metadata*) echo 0.5.23 ;;
  *) exit 3 ;;
esac
""")
    shim.chmod(0o755)
    space = parse_space("""\
name: dep
engine: sglang
model: m
fixed_flags: {--enable-dp-attention: true}
parameters:
  graphs_off: {type: bool, flag: --disable-cuda-graph}
""", "inline")
    host = LocalHost("local", HostSpec(transport="local", gpu_gate="off", python=str(shim)))
    study = optuna.create_study()
    try:
        flags = installed_flags(study, space, host)
    finally:
        host.close()
    assert "--attn-dp-size" in flags and study.user_attrs["engine_version"] == "0.5.23"
    assert study.user_attrs["engine_flags"]["key"] == f"sglang 0.5.23 ({shim})"
    assert study.user_attrs["engine_warnings"] == [
        "--enable-dp-attention is deprecated (--enable-dp-attention deprecated in SGLang 0.5.23); use --attn-dp-size N",
        "--disable-cuda-graph is deprecated (--disable-cuda-graph deprecated in SGLang 0.5.16); "
        "use --cuda-graph-backend-decode disabled"]
