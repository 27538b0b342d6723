"""nvidia-smi parsing and the GPU gate's decisions, on real-format samples of an 8x RTX PRO 6000 box."""

import pytest

from sweeper.hosts.gpu import (
    APPS_QUERY, GPU_QUERY, MODEL_QUERY, GpuHolder, GpuParseError, gpus_needed, holders_above, memory_not_released,
    format_gpu_model, parse_compute_apps, parse_gpu_memory, parse_gpu_names, parse_snapshot,
)
from sweeper.sim.nvidia_smi import render
from tests.support.paths import FIXTURE_DIR

SAMPLES = FIXTURE_DIR / "nvidia_smi"


def snapshot(name):
    return parse_snapshot((SAMPLES / f"{name}.gpu.csv").read_text(), (SAMPLES / f"{name}.apps.csv").read_text())


def test_idle_box():
    idle = snapshot("idle")
    assert len(idle.gpus) == 8 and idle.apps == ()
    assert idle.gpus[0].index == 0 and idle.gpus[0].used_mib == 3 and idle.gpus[0].total_mib == 97887
    assert idle.gpus[7].uuid.startswith("GPU-")
    assert holders_above(idle, range(8), 1024) == []


def test_busy_box_lists_one_holder_per_gpu_above_the_threshold():
    busy = snapshot("busy")
    holders = holders_above(busy, range(8), 1024)
    assert [h.gpu_index for h in holders] == list(range(8))
    assert holders[0] == GpuHolder(pid=48211, gpu_index=0, used_mib=91417)
    assert 48190 not in {h.pid for h in holders}  # 126 MiB: under the threshold
    assert [h.gpu_index for h in holders_above(busy, [2, 3], 1024)] == [2, 3]


def test_release_is_judged_against_the_baseline():
    idle, busy, released, lingering = (snapshot(n) for n in ("idle", "busy", "released", "lingering"))
    assert memory_not_released(idle, released, range(8), 1024) == []
    reasons = memory_not_released(idle, busy, range(8), 1024)
    assert "GPU 0 uses 91546 MiB (baseline 3 MiB)" in reasons
    assert any("pid 48211 still holds" in r for r in reasons)
    left = memory_not_released(idle, lingering, range(8), 1024)
    assert left == ["GPU 2 uses 91420 MiB (baseline 3 MiB)", "GPU 5 uses 91420 MiB (baseline 3 MiB)",
                    "pid 48213 still holds 91417 MiB on GPU 2", "pid 48216 still holds 0 MiB on GPU 5"]
    assert memory_not_released(idle, lingering, [0, 1], 1024) == []  # other GPUs are not ours to judge


def test_not_available_values_and_empty_output():
    apps = parse_compute_apps((SAMPLES / "lingering.apps.csv").read_text())
    assert apps[1].used_mib == 0
    assert parse_compute_apps("") == () and parse_compute_apps("\n") == ()
    assert gpus_needed(4, snapshot("idle")) == [0, 1, 2, 3]


@pytest.mark.parametrize("text", ["0, GPU-x, 3\n", "zero, GPU-x, 3, 97887\n", "index, uuid, memory.used [MiB]\n"])
def test_unexpected_output_is_an_error(text):
    with pytest.raises(GpuParseError):
        parse_gpu_memory(text)


def test_the_stand_in_prints_the_real_formats():
    """The test host's nvidia-smi stand-in must produce exactly what the parsers read from the real tool."""
    records = [{"pid": 4242, "gpu": 3, "used_mib": 80000}]
    gpus = parse_gpu_memory(render(list(GPU_QUERY[1:]), 8, records))
    apps = parse_compute_apps(render(list(APPS_QUERY[1:]), 8, records))
    real_line = (SAMPLES / "idle.gpu.csv").read_text().splitlines()[0]
    stand_in_line = render(list(GPU_QUERY[1:]), 8, []).splitlines()[0]
    assert [len(f) > 0 for f in stand_in_line.split(", ")] == [len(f) > 0 for f in real_line.split(", ")]
    assert gpus[3].used_mib == 80003 and apps[0].pid == 4242 and apps[0].gpu_uuid == gpus[3].uuid
    assert render(["--query-gpu=name", "--format=csv"], 8, []) is None  # anything else is refused


def test_the_stand_in_names_its_gpus_and_driver_as_the_real_tool_does():
    """MODEL_QUERY (the doctor's inventory, the study's gpu_model): the real H200's answer's shape."""
    real_line = (SAMPLES.parent / "vllm" / "nvidia_smi_idle.gpu.csv").read_text().splitlines()[0]
    stand_in = render(list(MODEL_QUERY[1:]), 8, [{"pid": 4242, "gpu": 1, "used_mib": 80000}])
    shape = lambda line: [f.replace(".", "").isdigit() for f in line.split(", ")]  # noqa: E731
    assert len(stand_in.splitlines()) == 8 and shape(stand_in.splitlines()[0]) == shape(real_line)
    assert parse_gpu_names(stand_in)[7] == ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "580.159.04")
    assert stand_in.splitlines()[1].endswith(", 80003, 97887")
    assert format_gpu_model(stand_in) == "8 x NVIDIA RTX PRO 6000 Blackwell Server Edition (97,887 MiB), driver 580.159.04"


def test_real_h200_outputs_idle_busy_released():
    """Captured from a real H200 (tests/fixtures/nvidia_smi/h200/README.md)."""
    def real(name):
        folder = SAMPLES / "h200"
        return parse_snapshot((folder / f"{name}.gpu.csv").read_text(), (folder / f"{name}.apps.csv").read_text())

    idle, busy, released = real("idle"), real("busy"), real("released")
    assert len(idle.gpus) == 1 and idle.gpus[0].total_mib == 143771 and idle.apps == ()
    assert busy.gpus[0].used_mib == 8719
    holders = holders_above(busy, range(1), 1024)
    assert [(h.pid, h.used_mib) for h in holders] == [(420, 8710)]
    assert released.gpus[0].used_mib == 0 and released.apps == ()


def test_real_h200_after_a_sweep_is_back_at_baseline():
    """nvidia-smi on the H200 after bench/gpu/run.sh's sweep of `transformers serve` (servers that
    held up to 124 GB each, stopped by group): nothing held, so the gate lets the next launch go."""
    folder = SAMPLES / "h200"
    idle = parse_snapshot((folder / "idle.gpu.csv").read_text(), (folder / "idle.apps.csv").read_text())
    busy = parse_snapshot((folder / "busy.gpu.csv").read_text(), (folder / "busy.apps.csv").read_text())
    after = parse_snapshot((folder / "after_sweep.gpu.csv").read_text(), (folder / "after_sweep.apps.csv").read_text())
    assert after.gpus[0].used_mib == 0 and after.apps == () and after.gpus[0].total_mib == 143771
    assert memory_not_released(idle, after, [0], 1024) == []
    assert memory_not_released(idle, busy, [0], 1024) == [
        "GPU 0 uses 8719 MiB (baseline 0 MiB)", "pid 420 still holds 8710 MiB on GPU 0"]


def test_gpu_names_from_the_model_query():
    from sweeper.hosts.gpu import parse_gpu_names

    rows = "0, GPU-ef4c, NVIDIA H200, 580.159.04, 0, 143771\n1, GPU-aa01, NVIDIA H200, 580.159.04, 12, 143771\n"
    assert parse_gpu_names(rows) == {0: ("NVIDIA H200", "580.159.04"), 1: ("NVIDIA H200", "580.159.04")}
