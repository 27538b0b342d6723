"""The simulator's /start_profile and /stop_profile on a real server process, as SGLang answers them."""

from __future__ import annotations

import re

import pytest
import requests

from sweeper.loadgen.client import run_level
from sweeper.loadgen.workload import build_prompt_token_ids
from sweeper.profile.trace import SOURCE_GPU, group_shares, kernel_shares, load_trace
from tests.support.sim import BASELINE_FLAGS, launched

pytestmark = pytest.mark.slow


def test_profile_endpoints_write_one_torch_trace_per_tp_rank(tmp_path):
    env_dir, body_dir = tmp_path / "env-dir", tmp_path / "body-dir"
    with launched(["--tp", "4", *BASELINE_FLAGS[2:]], env={"SGLANG_TORCH_PROFILER_DIR": str(env_dir)}) as server:
        server.wait_ready()
        stop = requests.post(server.url + "/stop_profile", timeout=10)
        assert stop.status_code == 400 and "not in progress" in stop.text
        assert requests.post(server.url + "/start_profile", json={"num_steps": 3}, timeout=10).status_code == 400
        start = requests.post(server.url + "/start_profile", json={"activities": ["CPU", "GPU"]}, timeout=10)
        assert start.status_code == 200, start.text
        again = requests.post(server.url + "/start_profile", timeout=10)
        assert again.status_code == 400 and "already in progress" in again.text
        run = run_level(server.url, "m", build_prompt_token_ids(8, 64, seed=1), 12, 4)
        assert all(s.ok for s in run.samples)
        assert requests.post(server.url + "/stop_profile", timeout=60).status_code == 200
        files = sorted(env_dir.iterdir())
        assert [re.sub(r"^[\d.]+", "<id>", f.name) for f in files] == [
            f"<id>-TP-{rank}.trace.json.gz" for rank in range(4)]
        assert server.wait_for_line("Profiling done.")

        # A second profile, to the folder the request names.
        assert requests.post(server.url + "/start_profile", json={"output_dir": str(body_dir)}, timeout=10).ok
        run_level(server.url, "m", build_prompt_token_ids(4, 64, seed=2), 12, 4)
        assert requests.post(server.url + "/stop_profile", timeout=60).ok
        assert len(list(body_dir.glob("*-TP-*.trace.json.gz"))) == 4
        assert len(list(env_dir.iterdir())) == 4  # the first profile's files untouched

    table = kernel_shares([load_trace(f) for f in files])
    assert table.source == SOURCE_GPU and table.traces == 4 and table.devices == 4
    by_name = {row.name: row for row in table.rows}
    # 2 rounds of 4 requests: at least 2 x 11 decode steps (the first token comes from the prefill) per rank.
    assert by_name["_tiled_sparse_decode_kernel"].calls >= 4 * 2 * 11
    assert group_shares(table)[0].group == "attention"
    # Every pass copies its sampled tokens out (4 bytes each): the 8 x 12 tokens served, on every rank.
    for path in files:
        copied = sum(e["args"]["bytes"] for e in load_trace(path)["traceEvents"] if e.get("cat") == "gpu_memcpy")
        assert copied == 4 * 8 * 12
