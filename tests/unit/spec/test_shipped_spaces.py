"""Every shipped search space loads (config validation), and its argv per engine version is
snapshotted: the seeds and every single-lever change from the first seed, each with the verdict
of that version's flag check (its captured --help) and its deprecation warnings.

Snapshots live in tests/fixtures/argv/<space>/<engine>-<version>.json. After an intended change,
rewrite them with `SWEEPER_UPDATE_SNAPSHOTS=1 pytest tests/unit/spec/test_shipped_spaces.py` and review
the diff."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sweeper.workflows.ablation import sampled_config, single_lever_changes
from sweeper.spec.hosts import HostSpec, load_hosts
from sweeper.spec.space_file import load_space
from sweeper.engines import get_engine
from sweeper.engines.flags import flag_problems, parse_help_flags
from sweeper.engines.versions import deprecation_warnings
from sweeper.spec.rules import excluded_by_rule, violated_constraints
from sweeper.search.configs import with_derived
from tests.support.paths import ROOT

SPACES = sorted((ROOT / "search_spaces").glob("*.yaml"))
HELP = ROOT / "tests" / "fixtures" / "help"
SNAPSHOTS = ROOT / "tests" / "fixtures" / "argv"
HOST = HostSpec(transport="local", env={"HF_HOME": "/data/hf"})
PORT, PYTHON = 30000, "/opt/venv/bin/python"
UPDATE = bool(os.environ.get("SWEEPER_UPDATE_SNAPSHOTS"))  # read at import: the conftest hides SWEEPER_*

# engine -> versions whose --help we hold (the simulator's is its live --help)
VERSIONS = {"sglang": ("0.5.9", "0.5.16", "0.5.20", "0.5.23"), "vllm": ("0.24.0", "0.33.0"), "sim": ("live",)}


def help_text(engine: str, version: str) -> str:
    if engine == "sim":
        return subprocess.run([sys.executable, "-m", "sweeper.sim", "--help"], capture_output=True, text=True,
                              timeout=60, check=True).stdout
    return (HELP / f"{engine}-{version}.txt").read_text()


def test_every_shipped_space_loads():
    assert {p.name for p in SPACES} >= {"demo-sim.yaml", "dsv4-flash-sm120.yaml", "vllm-moe-example.yaml"}
    for path in SPACES:
        space = load_space(path)
        assert space.parameters, path


def test_the_hosts_file_loads_and_its_commented_gpu_box_would_too():
    hosts = ROOT / "hosts.yaml"
    assert "local" in load_hosts(hosts).hosts
    lines = hosts.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "# rtx6000-8x:")
    block = ["hosts:"]
    for line in lines[start:]:
        if not line.strip().startswith("#"):
            break
        block.append("  " + line.strip()[2:].split("  #")[0].rstrip())
    import yaml

    from sweeper.spec.hosts import HostsFile

    spec = HostsFile.model_validate(yaml.safe_load("\n".join(block))).hosts["rtx6000-8x"]
    assert spec.transport == "ssh" and spec.gpus == 8 and spec.host_key_policy == "strict"


def snapshot_configs(space) -> list[tuple[str, dict]]:
    """The seeds, then every single-lever change from the first seed."""
    configs = [(seed.name, with_derived(space, sampled_config(space, seed.params))) for seed in space.seeds]
    if space.seeds:
        base = space.seeds[0].params
        configs += [(f"{lever}={value}", with_derived(space, config))
                    for lever, value, config in single_lever_changes(space, base)]
    return configs


def build_snapshot(space, engine_name: str, version: str) -> dict:
    engine = get_engine(engine_name)
    known = parse_help_flags(help_text(engine_name, version))
    family = getattr(engine, "flag_family", None)
    short = getattr(engine, "checks_short_flags", False)
    entries = []
    for label, config in snapshot_configs(space):
        spec = engine.build_launch_spec(space, config, HOST, PORT, PYTHON)
        entry = {"label": label, "argv": list(spec.argv), "env": dict(sorted(spec.env.items()))}
        if reason := excluded_by_rule(space, config):
            entry["excluded_by_rule"] = reason  # never launched, so never flag-checked
        elif broken := violated_constraints(space, config):
            entry["violates"] = broken
        else:
            entry["refused"] = flag_problems(spec.argv, known, short, family)
            entry["deprecated"] = deprecation_warnings(spec.argv, family or engine_name, version)
        entries.append(entry)
    return {"space": space.name, "engine": engine_name, "version": version, "configs": entries}


CASES = [(path, version) for path in SPACES for version in VERSIONS.get(load_space(path).engine, ())]


@pytest.mark.parametrize("path,version", CASES, ids=[f"{p.stem}-{v}" for p, v in CASES])
def test_argv_snapshot(path, version):
    space = load_space(path)
    snapshot = build_snapshot(space, space.engine, version)
    file = SNAPSHOTS / space.name / f"{space.engine}-{version}.json"
    text = json.dumps(snapshot, indent=1, ensure_ascii=False) + "\n"
    if UPDATE:
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text)
    assert file.is_file(), f"no snapshot {file}: run with SWEEPER_UPDATE_SNAPSHOTS=1 and review it"
    assert json.loads(file.read_text()) == snapshot


def test_the_dsv4_space_runs_on_0_5_23_and_each_older_release_refuses_what_it_lacks():
    """What the snapshots must say (so a wrong snapshot cannot be accepted by a blind update)."""
    space = load_space(ROOT / "search_spaces" / "dsv4-flash-sm120.yaml")
    by_version = {v: {e["label"]: e for e in build_snapshot(space, "sglang", v)["configs"]}
                  for v in VERSIONS["sglang"]}
    launched = [e for e in by_version["0.5.23"].values() if "refused" in e]
    assert launched and all(e["refused"] == [] for e in launched)
    assert by_version["0.5.23"]["case-study-baseline"]["argv"][:8] == [
        PYTHON, "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V4-Flash",
        "--host", "127.0.0.1", "--port"]
    # 0.5.20 lacks --attn-dp-size (the EP4 seed's flashinfer all-to-all)
    ep4 = by_version["0.5.20"]["case-study-ep4"]["refused"]
    assert ep4 == ["--attn-dp-size is not a flag of the installed engine; --attn-dp-size added in SGLang 0.5.23: "
                   "the installed version is older"]
    # 0.5.9 lacks the CUDA graph split and marlin
    baseline = by_version["0.5.9"]["case-study-baseline"]["refused"]
    assert any(p.startswith("--cuda-graph-backend-decode is not a flag") for p in baseline)
    assert any(p.startswith("--moe-runner-backend marlin: not one of") for p in baseline)
    assert by_version["0.5.16"]["case-study-baseline"]["refused"] == []
    # the FP4 rule keeps the garbage-serving runners from ever loading
    assert "Fp8MoEMethod" in by_version["0.5.23"]["moe_runner_backend=triton"]["excluded_by_rule"]
