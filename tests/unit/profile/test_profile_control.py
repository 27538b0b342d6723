"""Engine profiler controls, the profiler HTTP calls against a real local server, and the text table."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer


import pytest

from sweeper.errors import UserError
from sweeper.profile.control import (
    SGLANG_PROFILER, TRACE_SUBDIR, VLLM_PROFILER, VLLM_PROFILER_CONFIG, ProfilerRequestFailed, build_profiler_argv,
    build_profiler_env, call_profiler, profiler_for,
)
from sweeper.profile.outputs import build_profile_record, format_profile_text
from sweeper.profile.run import profiled_request_count
from sweeper.profile.trace import DeviceBusy, KernelRow, KernelTable, group_shares
from tests.support.paths import FIXTURE_DIR


def test_each_engine_gets_its_profiler_or_a_clear_refusal():
    assert profiler_for("sglang") is SGLANG_PROFILER and profiler_for("sim") is SGLANG_PROFILER
    assert profiler_for("vllm") is VLLM_PROFILER_CONFIG  # version unknown: the newest spelling
    assert profiler_for("vllm", "0.10.1") is VLLM_PROFILER
    assert build_profiler_env(SGLANG_PROFILER) == {"SGLANG_TORCH_PROFILER_DIR": TRACE_SUBDIR}
    assert build_profiler_env(VLLM_PROFILER) == {"VLLM_TORCH_PROFILER_DIR": TRACE_SUBDIR}
    assert SGLANG_PROFILER.build_start_body("/w/s/3/profile/traces") == {
        "activities": ["CPU", "GPU"], "with_stack": False, "record_shapes": False,
        "output_dir": "/w/s/3/profile/traces"}
    assert VLLM_PROFILER.build_start_body("/w/traces") is None  # vLLM's endpoints take no body
    with pytest.raises(UserError, match="engine 'llamacpp' has no torch profiler endpoint"):
        profiler_for("llamacpp")


FIXTURES = FIXTURE_DIR


@pytest.mark.parametrize("version, help_file", [("0.24.0", "help/vllm-0.24.0.txt"),
                                                ("0.33.0", "help/vllm-0.33.0.txt")])
def test_vllm_024_and_033_switch_the_profiler_on_with_the_flag_their_help_lists(version, help_file):
    """0.24.0 on the H200 logged 'Unknown vLLM environment variable detected:
    VLLM_TORCH_PROFILER_DIR' and answered /start_profile with 404; --profiler-config worked
    (tests/fixtures/vllm/README.md). Before: the variable, for every version."""
    control = profiler_for("vllm", version)
    assert build_profiler_env(control) == {}
    flag, value = build_profiler_argv(control)
    assert f"  {flag} PROFILER_CONFIG" in (FIXTURES / help_file).read_text()
    assert json.loads(value) == {"profiler": "torch", "torch_profiler_with_stack": False,
                                 "torch_profiler_dir": TRACE_SUBDIR}
    assert build_profiler_argv(SGLANG_PROFILER) == []


class Answers(BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        Answers.bodies.append(self.rfile.read(length))
        status = 200 if self.path == "/start_profile" else 400
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b"Start profiling.\n" if status == 200 else b"Profiling is not in progress.\n")

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = HTTPServer(("127.0.0.1", 0), Answers)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_profiler_calls_send_the_body_and_report_refusals(server):
    assert call_profiler(server, "/start_profile", SGLANG_PROFILER.start_body, 5) == "Start profiling."
    assert b'"activities": ["CPU", "GPU"]' in Answers.bodies[-1]
    with pytest.raises(ProfilerRequestFailed, match="POST /stop_profile answered 400: Profiling is not in progress"):
        call_profiler(server, "/stop_profile", None, 5)
    with pytest.raises(ProfilerRequestFailed, match="POST /start_profile failed"):
        call_profiler("http://127.0.0.1:9", "/start_profile", None, 5)


def test_request_count_covers_the_time_in_whole_rounds():
    assert profiled_request_count(4, 10.0, 1.0) == 40
    assert profiled_request_count(4, 10.0, 3.0) == 16  # 4 rounds: at least the time asked
    assert profiled_request_count(16, 0.1, 5.0) == 16  # at least one round
    assert profiled_request_count(8, 1e6, 0.0) == 20_000  # capped


def test_text_table_shows_groups_kernels_and_truncates_long_names():
    long_name = "void cutlass::Kernel2<" + "x" * 200 + ">"
    rows = [KernelRow("_tiled_sparse_decode_kernel", "attention", 630_000.0, 0.63, 300),
            KernelRow(long_name, "moe_gemm", 370_000.0, 0.37, 600)]
    table = KernelTable(rows, "gpu_kernels", 1_000_000.0, 8, 8)
    groups = group_shares(table)
    busy = [DeviceBusy(0, 0, 90.0, 100.0), DeviceBusy(1, 1, 80.0, 100.0)]
    text = format_profile_text("title", table, groups, busy, top=5)
    lines = text.splitlines()
    assert lines[0] == "title"
    assert "summed over 8 GPU(s) in 8 trace file(s): 1000.0 ms" in lines[1]
    assert lines[2].startswith("GPU busy: 85.0% of the profiled span, mean of 2 GPU(s) (lowest 80.0%)")
    assert any(line.startswith("attention") and "63.0%" in line and "630.0" in line for line in lines)
    assert any(line.startswith("communication") and "0.0%" in line for line in lines)
    assert "  1   63.0%      630.00      300  attention      _tiled_sparse_decode_kernel" in lines
    assert max(len(line) for line in lines) < 160 and "..." in text
    record = build_profile_record({"trial": 3}, table, groups, busy)
    assert record["trial"] == 3 and record["kernels"][1]["name"] == long_name  # full names in JSON
    assert record["gpu_busy"][0]["busy_share"] == 0.9 and record["groups"][0]["group"] == "attention"
