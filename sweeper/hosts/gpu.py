"""nvidia-smi's CSV output, parsed, and the decisions the GPU gate takes on it. Pure: no I/O.

The two queries (the exact command lines are GPU_QUERY and APPS_QUERY):
  --query-gpu=index,uuid,memory.used,memory.total --format=csv,noheader,nounits
      0, GPU-5f0c3e1a-..., 3, 97887
  --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits
      GPU-5f0c3e1a-..., 48211, 90112        (nothing at all when no process holds memory)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

GPU_QUERY = ("nvidia-smi", "--query-gpu=index,uuid,memory.used,memory.total",
             "--format=csv,noheader,nounits")
# What the GPUs are, for the study's provenance (the same columns bench/gpu/vllm/run.sh captures)
MODEL_QUERY = ("nvidia-smi", "--query-gpu=index,uuid,name,driver_version,memory.used,memory.total",
               "--format=csv,noheader,nounits")
# Board power of each GPU, watts (energy per token; a real H200's: tests/fixtures/nvidia_smi/h200/power.*)
POWER_QUERY = ("nvidia-smi", "--query-gpu=index,uuid,power.draw", "--format=csv,noheader,nounits")
APPS_QUERY = ("nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory",
              "--format=csv,noheader,nounits")


class GpuParseError(ValueError):
    pass


@dataclass(frozen=True)
class GpuMemory:
    index: int
    uuid: str
    used_mib: int
    total_mib: int


@dataclass(frozen=True)
class GpuApp:
    gpu_uuid: str
    pid: int
    used_mib: int  # 0 when the driver reports [N/A]


@dataclass(frozen=True)
class GpuSnapshot:
    gpus: tuple[GpuMemory, ...]
    apps: tuple[GpuApp, ...]

    def index_of(self, uuid: str) -> int | None:
        return next((g.index for g in self.gpus if g.uuid == uuid), None)


@dataclass(frozen=True)
class GpuHolder:
    """A process holding memory on a GPU the trial needs."""

    pid: int
    gpu_index: int
    used_mib: int


def _rows(text: str, width: int, what: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("No running"):
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != width:
            raise GpuParseError(f"unexpected nvidia-smi {what} line: {line!r}")
        rows.append(fields)
    return rows


def _mib(field: str) -> int:
    """A MiB count; [N/A] and [Not Supported] read as 0."""
    return int(field) if field.isdigit() else 0


def parse_gpu_memory(text: str) -> tuple[GpuMemory, ...]:
    """Rows of `--query-gpu=index,uuid,memory.used,memory.total --format=csv,noheader,nounits`."""
    try:
        return tuple(GpuMemory(int(i), uuid, _mib(used), _mib(total))
                     for i, uuid, used, total in _rows(text, 4, "gpu"))
    except ValueError as exc:
        raise GpuParseError(str(exc)) from None


def format_gpu_model(text: str) -> str:
    """'1 x NVIDIA H200 (143,771 MiB), driver 580.159.04' from MODEL_QUERY's rows ('' when none)."""
    try:
        rows = _rows(text, 6, "gpu")
    except ValueError as exc:
        raise GpuParseError(str(exc)) from None
    if not rows:
        return ""
    kinds: dict[str, int] = {}
    for _, _, name, _, _, total in rows:
        label = f"{name} ({_mib(total):,} MiB)"
        kinds[label] = kinds.get(label, 0) + 1
    drivers = sorted({row[3] for row in rows})
    return ", ".join(f"{n} x {label}" for label, n in kinds.items()) + f", driver {'/'.join(drivers)}"


def parse_gpu_names(text: str) -> dict[int, tuple[str, str]]:
    """GPU index -> (name, driver) from MODEL_QUERY's rows."""
    try:
        return {int(index): (name, driver) for index, _, name, driver, _, _ in _rows(text, 6, "gpu")}
    except ValueError as exc:
        raise GpuParseError(str(exc)) from None


def parse_power(text: str) -> dict[int, float]:
    """GPU index -> watts from POWER_QUERY's rows; a GPU reading [N/A] is left out."""
    try:
        return {int(index): float(watts) for index, _, watts in _rows(text, 3, "power")
                if watts.replace(".", "", 1).isdigit()}
    except ValueError as exc:
        raise GpuParseError(str(exc)) from None


def parse_compute_apps(text: str) -> tuple[GpuApp, ...]:
    """Rows of `--query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits`."""
    try:
        return tuple(GpuApp(uuid, int(pid), _mib(used)) for uuid, pid, used in _rows(text, 3, "app"))
    except ValueError as exc:
        raise GpuParseError(str(exc)) from None


def parse_snapshot(gpu_text: str, apps_text: str) -> GpuSnapshot:
    return GpuSnapshot(parse_gpu_memory(gpu_text), parse_compute_apps(apps_text))


def holders_above(snapshot: GpuSnapshot, indices: Iterable[int], threshold_mib: int) -> list[GpuHolder]:
    """Processes holding more than `threshold_mib` on one of the GPUs `indices`."""
    wanted = set(indices)
    holders = []
    for app in snapshot.apps:
        index = snapshot.index_of(app.gpu_uuid)
        if index in wanted and app.used_mib > threshold_mib:
            holders.append(GpuHolder(app.pid, index, app.used_mib))
    return holders


def memory_not_released(baseline: GpuSnapshot, now: GpuSnapshot, indices: Iterable[int],
                        slack_mib: int) -> list[str]:
    """Why the GPUs `indices` are not back to `baseline` (empty when they are): memory used above
    baseline + slack, or a process holding memory that was not there at baseline."""
    before = {g.index: g.used_mib for g in baseline.gpus}
    old_pids = {app.pid for app in baseline.apps}
    wanted = set(indices)
    reasons = [f"GPU {g.index} uses {g.used_mib} MiB (baseline {before[g.index]} MiB)"
               for g in now.gpus
               if g.index in wanted and g.index in before and g.used_mib > before[g.index] + slack_mib]
    reasons += [f"pid {app.pid} still holds {app.used_mib} MiB on GPU {now.index_of(app.gpu_uuid)}"
                for app in now.apps
                if app.pid not in old_pids and now.index_of(app.gpu_uuid) in wanted]
    return reasons


def gpus_needed(gpu_count: int, snapshot: GpuSnapshot, visible: str | None = None) -> list[int]:
    """The GPUs a trial may use: those of CUDA_VISIBLE_DEVICES (a GPU set of a shared host) when
    given, else the host's first `gpu_count` GPUs that exist."""
    existing = sorted(g.index for g in snapshot.gpus)
    if visible:
        wanted = {int(d) for d in visible.split(",") if d.strip().isdigit()}
        return [i for i in existing if i in wanted]
    return existing[:gpu_count]
