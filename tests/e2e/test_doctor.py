"""`sweeper doctor` against the real OpenSSH test host: a healthy setup passes, and each planted
problem is its own line with exit 1, with nothing launched and nothing written to results/."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from sweeper.sim.gpumem import record_gpu_memory
from tests.support.spaces import TINY_SPACE
from tests.support.ports import free_port, server_socket
from tests.support.tcp_relay import proxy_command

pytestmark = pytest.mark.slow
BARE_PYTHON = "/usr/bin/python3"  # Debian's python: sweeper is not installed for it


@pytest.fixture
def doctor(cli, sshd, tmp_path):
    """Runs `sweeper doctor` on a space text against the sshd host; returns (result, checks)."""
    work = tmp_path / "remote-work"
    entry = sshd.host_entry(work, base_port=free_port())

    def run(space_text: str = TINY_SPACE, *extra: str, **host_keys):
        (cli.workdir / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"box": {**entry, **host_keys}}}))
        (cli.workdir / "space.yaml").write_text(space_text)
        result = cli.run("doctor", "space.yaml", "--host", "box", "--json", *extra, timeout=120)
        assert not list(work.rglob("server.log")) and not (cli.workdir / "results").exists()  # nothing launched
        return result, json.loads(result.stdout)

    run.cli, run.base_port = cli, entry["base_port"]
    return run


def problems(checks: list[dict]) -> set[str]:
    return {c["name"] for c in checks if not c["ok"]}


def test_a_healthy_setup_passes_every_check(doctor, ssh_home):
    result, checks = doctor()
    assert result.returncode == 0, result.stdout + result.stderr
    assert problems(checks) == set()
    names = [c["name"] for c in checks]
    for name in ("connection", "python", "engine", "flags: fixed", "flags: moe_runner_backend", "model",
                 "gpus", "gpus: free", "ports", "disk", "seed baseline", "seed garbage"):
        assert name in names
    by_name = {c["name"]: c["detail"] for c in checks}
    assert by_name["engine"].startswith("sim ")
    assert "a hub id, not checked" in by_name["model"]
    assert by_name["gpus"].count("97887 MiB") == 8 and "?" not in by_name["gpus"]
    assert by_name["gpus"].startswith("0: NVIDIA RTX PRO 6000 Blackwell Server Edition (97887 MiB, 3 used, "
                                      "driver 580.159.04); 1: ")
    assert f"--port {doctor.base_port} " in by_name["seed baseline"]
    assert "NCCL_PROTO=Simple " in by_name["seed baseline"]

    text = doctor.cli.run("doctor", "space.yaml", "--host", "box")
    assert text.returncode == 0
    assert all(line.startswith("ok ") for line in text.stdout.splitlines())


def test_missing_model_path(doctor, ssh_home):
    result, checks = doctor(TINY_SPACE.replace("model: deepseek-ai/DeepSeek-V4-Flash", "model: /nonexistent/model"))
    assert result.returncode == 1
    assert problems(checks) == {"model"}


def test_engine_not_installed(doctor, ssh_home):
    result, checks = doctor(TINY_SPACE.replace("engine: sim", "engine: sglang"))
    assert result.returncode == 1
    assert problems(checks) == {"engine"}  # one cause, one problem line: the flag check depends on it
    assert "sglang is not installed" in next(c["detail"] for c in checks if c["name"] == "engine")
    assert next(c for c in checks if c["name"] == "flags").get("skipped")


@pytest.mark.skipif(not os.path.exists(BARE_PYTHON), reason="needs the system's python3")
def test_a_host_python_that_cannot_run_the_engine(doctor, ssh_home):
    # PYTHONPATH finds the checkout's metadata (the version line is ok), but not the simulator's
    # dependencies: its --help fails, and that is the problem line
    result, checks = doctor(python=BARE_PYTHON)
    assert result.returncode == 1
    assert problems(checks) == {"flags"}
    detail = next(c["detail"] for c in checks if not c["ok"])
    assert "cannot read the engine's flags" in detail and "No module named" in detail


def test_a_choice_the_engine_does_not_list(doctor, ssh_home):
    result, checks = doctor(TINY_SPACE.replace("choices: [marlin, flashinfer_mxfp4, triton]",
                                               "choices: [marlin, flashinfer_mxfp4, triton, warp_drive]"))
    assert result.returncode == 1
    assert problems(checks) == {"flags: moe_runner_backend"}
    detail = next(c["detail"] for c in checks if not c["ok"])
    assert "--moe-runner-backend warp_drive: not one of the installed engine's choices" in detail


def test_a_busy_gpu(doctor, ssh_home, sshd):
    foreign = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "someone-elses-job"])
    try:
        record_gpu_memory(foreign.pid, 3, 40000, sshd.gpu_state)
        result, checks = doctor()
        assert foreign.poll() is None  # looked at, never touched
    finally:
        foreign.kill()
        foreign.wait()
    assert result.returncode == 1
    assert problems(checks) == {"gpus: free"}
    detail = next(c["detail"] for c in checks if not c["ok"])
    assert f"pid {foreign.pid} (40000 MiB on GPU 3)" in detail and "someone-elses-job" in detail


def test_a_busy_base_port(doctor, ssh_home):
    with server_socket() as listener:
        listener.bind(("127.0.0.1", doctor.base_port))
        listener.listen()
        result, checks = doctor()
    assert result.returncode == 1
    assert problems(checks) == {"ports"}


def test_a_busy_internal_port_of_the_engine(doctor, ssh_home):
    """With DP attention SGLang (and the sim) binds --port + 233 .. + 238: a listener on the
    detokenizer's port is named, though the HTTP port itself is free."""
    space = TINY_SPACE.replace("fixed_flags: {", "fixed_flags: {--attn-dp-size: 2, ")
    with server_socket() as listener:
        listener.bind(("127.0.0.1", doctor.base_port + 235))
        listener.listen()
        result, checks = doctor(space)
    assert result.returncode == 1
    assert problems(checks) == {"ports"}
    detail = next(c["detail"] for c in checks if c["name"] == "ports")
    assert f"{doctor.base_port + 235} (detokenizer_port (DP attention))" in detail.split("(of")[0]
    healthy, checks = doctor(space)
    detail = next(c["detail"] for c in checks if c["name"] == "ports")
    assert healthy.returncode == 0 and "including the engine's internal ones" in detail
    assert f"{doctor.base_port} (--port), {doctor.base_port + 233} (dist_init_port (DP attention))" in detail


def test_an_unknown_host_key_is_a_problem_line_not_a_traceback(doctor, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)  # no ssh_home: the host key is not trusted
    result, checks = doctor()
    assert result.returncode == 1
    assert [c["name"] for c in checks] == ["connection"] and not checks[0]["ok"]
    assert "Traceback" not in result.stderr
    text = doctor.cli.run("doctor", "space.yaml", "--host", "box")
    assert text.stdout.startswith("problem  connection: box: ") and "fix: " in text.stdout


def test_a_host_named_by_its_ssh_config_alias_behind_a_proxy_command(doctor, sshd, ssh_home, tmp_path):
    relay = doctor.cli.workdir / "relay.log"
    (ssh_home / ".ssh" / "conf.d").mkdir()
    (ssh_home / ".ssh" / "conf.d" / "gpu.conf").write_text(
        f"Host gpu-box\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n  IdentityFile {sshd.user_key}\n"
        f"  ProxyCommand {proxy_command(relay, '%h', '%p')}\n")
    config = tmp_path / "ssh_config"
    config.write_text("Include conf.d/*\n")
    from_config = {"address": "gpu-box", "port": None, "user": None, "identity_file": None, "ssh_config": str(config)}
    result, checks = doctor(**from_config)
    assert result.returncode == 0 and problems(checks) == set(), result.stdout + result.stderr
    assert relay.read_text().split()[1:] == ["127.0.0.1", str(sshd.port)]
    result, checks = doctor(**{**from_config, "port": free_port()})  # hosts.yaml's port wins: nothing there
    assert problems(checks) == {"connection"}
    assert "ProxyCommand exited 1" in checks[0]["detail"] and "Connection refused" in checks[0]["detail"]


def _failing_nvidia_smi(folder) -> str:
    """An nvidia-smi that fails as the real one does on a host whose driver is not loaded (exit 9):
    a PATH for the host entry that finds it first."""
    bin_dir = folder / "broken-bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(
        "#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\"\nexit 9\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    return str(bin_dir)


@pytest.mark.parametrize("gate", ["auto", "on"])
def test_a_failing_nvidia_smi_is_the_gpus_line_and_the_other_checks_still_run(doctor, sshd, ssh_home, tmp_path, gate):
    env = {**sshd.host_env(), "PATH": f"{_failing_nvidia_smi(tmp_path)}:{sshd.host_env()['PATH']}"}
    result, checks = doctor(env=env, gpu_gate=gate)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert problems(checks) == {"gpus"}
    gpus = next(c for c in checks if c["name"] == "gpus")
    assert "exited 9" in gpus["detail"] and "couldn't communicate with the NVIDIA driver" in gpus["detail"]
    assert "gpu_gate: off" in gpus["fix"]
    names = [c["name"] for c in checks]
    assert names[names.index("gpus"):][:3] == ["gpus", "ports", "disk"] and "seed baseline" in names


def test_gpu_gate_on_without_nvidia_smi_is_a_problem_line(doctor, sshd, ssh_home):
    env = {**sshd.host_env(), "PATH": "/usr/local/bin:/usr/bin:/bin"}  # the stand-in's folder left out
    result, checks = doctor(env=env, gpu_gate="on")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert problems(checks) == {"gpus"}
    assert "nvidia-smi is not on the host's PATH" in next(c["detail"] for c in checks if c["name"] == "gpus")
    text = doctor.cli.run("doctor", "space.yaml", "--host", "box")
    assert "problem  gpus: " in text.stdout and "ok       disk: " in text.stdout
