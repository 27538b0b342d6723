"""A STAND-IN for `nvidia-smi`, for hosts without a GPU (tests, the simulator). It is not the real
tool: it answers only the queries sweeper runs, in exactly the real tool's formats,

  nvidia-smi --query-gpu=index,uuid,memory.used,memory.total --format=csv,noheader,nounits
  nvidia-smi --query-gpu=index,uuid,name,driver_version,memory.used,memory.total --format=csv,noheader,nounits
  nvidia-smi --query-gpu=index,uuid,power.draw --format=csv,noheader,nounits
  nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits

(any subset of those --query-gpu fields, in any order, as the real tool answers it)

from the simulator's bookkeeping (gpumem.py: `$SWEEPER_SIM_GPU_STATE/<pid>.json`), listing only
processes that are alive. Power is a made-up constant per GPU, not a model: an H200's idle
reading (tests/fixtures/nvidia_smi/h200/power.idle.csv) with no server on the GPU, BUSY_W with one. `$SWEEPER_SIM_GPUS` GPUs (default 8) of 97887 MiB, named as the board the
simulator models (GPU_NAME), with the driver of the captured H200 (tests/fixtures/vllm/nvidia_smi_idle.gpu.csv:
the real tool's format of name and driver_version). Any other query
exits 2, so nothing can mistake it for the real tool.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

from sweeper.sim.gpumem import GPUS_VAR, TOTAL_MIB, state_dir

GPU_FIELDS = {"index", "uuid", "name", "driver_version", "memory.used", "memory.total", "power.draw"}
GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
DRIVER_VERSION = "580.159.04"
APP_FIELDS = {"gpu_uuid", "pid", "used_memory"}
IDLE_MIB = 3
IDLE_W, BUSY_W = 79.67, 412.5


def gpu_uuid(index: int) -> str:
    return f"GPU-5117a5e0-{index:04x}-4a11-8f00-{index:012x}"


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def live_records(folder: Path | None) -> list[dict]:
    records = []
    for path in sorted(folder.glob("*.json")) if folder and folder.is_dir() else []:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if _alive(int(record["pid"])):
            records.append(record)
        else:
            path.unlink(missing_ok=True)  # released for good: a reused pid must not inherit it
    return records


def _fields(argv: Sequence[str], prefix: str) -> list[str] | None:
    for arg in argv:
        if arg.startswith(prefix):
            return arg[len(prefix):].split(",")
    return None


def render(argv: Sequence[str], gpu_count: int, records: list[dict]) -> str | None:
    if "--format=csv,noheader,nounits" not in argv:
        return None
    if (fields := _fields(argv, "--query-gpu=")) and set(fields) <= GPU_FIELDS:
        used = {i: IDLE_MIB for i in range(gpu_count)}
        for record in records:
            if record["gpu"] in used:
                used[record["gpu"]] += int(record["used_mib"])
        values = lambda i: {"index": str(i), "uuid": gpu_uuid(i), "name": GPU_NAME,  # noqa: E731
                            "driver_version": DRIVER_VERSION, "memory.used": str(used[i]),
                            "memory.total": str(TOTAL_MIB),
                            "power.draw": f"{BUSY_W if used[i] > IDLE_MIB else IDLE_W:.2f}"}
        return "".join(", ".join(values(i)[f] for f in fields) + "\n" for i in range(gpu_count))
    if (fields := _fields(argv, "--query-compute-apps=")) and set(fields) <= APP_FIELDS:
        rows = [{"gpu_uuid": gpu_uuid(r["gpu"]), "pid": str(r["pid"]), "used_memory": str(r["used_mib"])}
                for r in records if 0 <= r["gpu"] < gpu_count]
        return "".join(", ".join(row[f] for f in fields) + "\n" for row in rows)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    import os

    argv = list(sys.argv[1:] if argv is None else argv)
    text = render(argv, int(os.environ.get(GPUS_VAR, "8")), live_records(state_dir()))
    if text is None:
        print("nvidia-smi stand-in (sweeper.sim.nvidia_smi): unsupported query", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
