"""Energy and fair-comparison metrics: nvidia-smi power parsed from a real H200's output, integrated
over a run; GPUs per config from the engine's argv; per-GPU and per-user throughput."""

from __future__ import annotations

import time

import pytest

from sweeper.engines.adapter import gpus_in_argv
from sweeper.engines.sglang import SGLANG_INFO
from sweeper.engines.vllm import VLLM_INFO
from sweeper.hosts.gpu import POWER_QUERY, GpuParseError, parse_power
from sweeper.loadgen.metrics import per_user_throughput
from sweeper.sim.nvidia_smi import BUSY_W, IDLE_W, render
from sweeper.trial.energy import PowerMeter, energy_j
from sweeper.trial.load_ladder import energy_fields, per_gpu_fields
from tests.support.paths import FIXTURE_DIR

H200 = FIXTURE_DIR / "nvidia_smi" / "h200"


def test_real_h200_power_readings_parse():
    assert parse_power((H200 / "power.idle.csv").read_text()) == {0: 79.67}
    assert parse_power((H200 / "power.busy.csv").read_text()) == {0: 555.78}  # a bf16 matmul loop
    assert parse_power("0, GPU-x, [N/A]\n1, GPU-y, 301.5\n") == {1: 301.5}
    with pytest.raises(GpuParseError):
        parse_power("0, 79.67\n")


def test_energy_over_the_real_h200_series():
    """A sample every ~0.28 s while a matmul loop ran: the plateau near 692 W."""
    rows = [line.split(", ") for line in (H200 / "power.series.csv").read_text().splitlines()]
    times, watts = [float(r[0]) for r in rows], [float(r[3]) for r in rows]
    joules = energy_j(times, watts, 8.0, 11.0)
    assert joules == pytest.approx(3 * 691, rel=0.01)
    whole = energy_j(times, watts, times[0], times[-1])
    assert min(watts) * (times[-1] - times[0]) < whole < max(watts) * (times[-1] - times[0])


def test_energy_integration_is_the_trapezoid_rule_with_held_edges():
    assert energy_j([0.0, 10.0], [100.0, 200.0], 0.0, 10.0) == pytest.approx(1500.0)
    assert energy_j([0.0, 10.0], [100.0, 200.0], 5.0, 10.0) == pytest.approx(5 * 175.0)  # edge interpolated
    assert energy_j([4.0], [300.0], 0.0, 2.0) == pytest.approx(600.0)  # one sample: held flat
    assert energy_j([], [], 0.0, 1.0) is None


def test_the_meter_sums_the_servers_gpus_and_reads_once_before_the_load():
    readings = iter([{0: 100.0, 1: 200.0, 2: 999.0}] * 1000)
    with PowerMeter(lambda: next(readings), gpus=[0, 1], interval_s=0.01) as meter:
        assert meter.watts == [300.0]  # taken on entry
        start = time.monotonic()
        time.sleep(0.1)
        end = time.monotonic()
    assert set(meter.watts) == {300.0} and len(meter.watts) > 2
    assert meter.energy_j(start, end) == pytest.approx(300.0 * (end - start))


def test_a_failing_reading_costs_only_the_energy():
    def broken():
        raise OSError("connection lost")
    with PowerMeter(broken, gpus=None, interval_s=0.01) as meter:
        time.sleep(0.05)
    assert meter.energy_j(0.0, time.monotonic()) is None


def test_gpus_from_the_engines_parallel_flags():
    sglang = ["python", "-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "4", "--dp-size", "2",
              "--ep-size", "4"]
    assert gpus_in_argv(sglang, SGLANG_INFO.parallel_flags) == 8  # expert parallelism adds none
    assert gpus_in_argv(["vllm", "serve", "m", "-tp", "2", "--pipeline-parallel-size=2"], VLLM_INFO.parallel_flags) == 4
    assert gpus_in_argv(["vllm", "serve", "m"], VLLM_INFO.parallel_flags) == 1
    assert gpus_in_argv(["llama-server", "-t", "2"], ()) is None  # the engine does not say


def test_per_gpu_per_user_and_energy_fields():
    assert per_gpu_fields({"output_throughput": 1200.0}, 8) == {"gpus": 8, "output_throughput_per_gpu": 150.0}
    assert per_gpu_fields({"output_throughput": 1200.0}, None)["output_throughput_per_gpu"] is None
    assert per_user_throughput([0.02, 0.025, 0.03]) == pytest.approx(40.0)  # 1 / median TPOT (25 ms)
    assert per_user_throughput([]) is None
    # two runs: 700 W for 2 s over 1000 tokens, then 700 W for 1 s over 400 tokens
    fields = energy_fields([(1400.0, 2.0, 1000), (700.0, 1.0, 400)])
    assert fields == {"power_w_mean": pytest.approx(700.0), "energy_j_per_output_token": pytest.approx(1.5)}
    assert energy_fields([(14.0, 0.02, 10)], time_scale=0.01)["energy_j_per_output_token"] == pytest.approx(140.0)
    assert energy_fields([]) == {"power_w_mean": None, "energy_j_per_output_token": None}


def test_the_stand_in_answers_the_power_query_in_the_real_format():
    idle = render(list(POWER_QUERY[1:]), 2, [])
    busy = render(list(POWER_QUERY[1:]), 2, [{"pid": 1, "gpu": 1, "used_mib": 9000}])
    assert parse_power(idle) == {0: IDLE_W, 1: IDLE_W} and parse_power(busy) == {0: IDLE_W, 1: BUSY_W}
    real = (H200 / "power.idle.csv").read_text().splitlines()[0].split(", ")
    assert len(idle.splitlines()[0].split(", ")) == len(real)
