"""Per-trial GPU memory through the CLI: a simulator sweep on the local host with the GPU gate on,
nvidia-smi being the stand-in (sweeper/sim/nvidia_smi.py: the real tool's two query formats, fed
by the simulator's scheduler children, released exactly when they exit; its power.draw a constant
per busy GPU, so the energy per token a level records is checkable). The real tool's numbers
from an H200 are in bench/gpu/README.md; this checks the recording, which no GPU is needed for."""

from __future__ import annotations

import json

import pytest

from sweeper.sim.nvidia_smi import BUSY_W
from tests.support.ports import worker_port
from tests.support.sshd import install_stand_in

IDLE_MIB = 3  # the stand-in's idle reading per GPU


def test_each_launched_trial_records_memory_before_serving_and_after(cli, tmp_path):
    bin_dir, state = install_stand_in(tmp_path)
    path = f"{bin_dir}:{cli.env['PATH']}"
    (cli.workdir / "hosts.yaml").write_text(f"""\
hosts:
  local:
    transport: local
    base_port: {worker_port(31000)}
    gpus: 8
    gpu_gate: "on"
    gpu_release_timeout_s: 30
    env: {{PATH: "{path}", SWEEPER_SIM_GPU_STATE: "{state}"}}
""")
    result = cli.run("sweep", "tiny.yaml", "--study", "mem", "--trials", "2")
    assert result.returncode == 0, result.stderr

    recorded = []
    for number, outcome in sorted(cli.outcomes("mem").items()):
        trial = cli.workdir / "results/mem/trials" / str(number)
        if not outcome.get("launched"):
            assert not (trial / "gpu_memory.json").exists()  # nothing launched, nothing to record
            continue
        memory = json.loads((trial / "gpu_memory.json").read_text())
        assert outcome["gpu_memory"] == memory
        assert memory["before"] == {str(i): IDLE_MIB for i in range(8)}
        assert memory["after"] == memory["before"]  # back at baseline: the gate waited for it
        assert max(memory["serving"].values()) > IDLE_MIB  # the server held memory while serving
        assert outcome["stage_seconds"]["gpu_release"] >= 0
        for level in outcome["levels"].values():  # energy: the stand-in's power of the server's GPUs
            gpus = outcome["config"]["tp_size"]
            assert level["gpus"] == gpus
            assert level["output_throughput_per_gpu"] == pytest.approx(level["output_throughput"] / gpus)
            assert level["power_w_mean"] == pytest.approx(gpus * BUSY_W)
            # joules in modelled time (time scale 0.01), as the throughput is
            assert level["energy_j_per_output_token"] == pytest.approx(
                gpus * BUSY_W / level["output_throughput"], rel=0.2)
        recorded.append(trial.name)
    assert len(recorded) >= 1

    out = cli.run("leaderboard", "mem", "--csv", "mem.csv")
    assert out.returncode == 0, out.stderr
    import pandas as pd

    frame = pd.read_csv(cli.workdir / "mem.csv")
    launched = frame[frame["trial"].astype(str).isin(recorded)]
    assert (launched["gpu_serving_mib"] > 8 * IDLE_MIB).all()  # all GPUs' MiB at the end of the load
