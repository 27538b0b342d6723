"""The simulator's bookkeeping of "GPU memory", read by the nvidia-smi stand-in (nvidia_smi.py).

When SWEEPER_SIM_GPU_STATE names a folder, each scheduler child (one per GPU rank, as SGLang's
`sglang::scheduler_TP{rank}`) is recorded there as `<pid>.json` = {"pid", "gpu", "used_mib"}.
The stand-in lists only records whose process is alive, so memory is "released" exactly when the
process holding it is gone (a SIGKILLed server's orphaned children keep holding it, as on a GPU).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

STATE_VAR = "SWEEPER_SIM_GPU_STATE"
GPUS_VAR = "SWEEPER_SIM_GPUS"
TOTAL_MIB = 97887  # an RTX PRO 6000 Blackwell (96 GB) as nvidia-smi reports it


def state_dir() -> Path | None:
    value = os.environ.get(STATE_VAR)
    return Path(value) if value else None


def record_gpu_memory(pid: int, gpu: int, used_mib: int, folder: Path | None = None) -> None:
    folder = folder or state_dir()
    if folder is None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{pid}.tmp"
    tmp.write_text(json.dumps({"pid": pid, "gpu": gpu, "used_mib": used_mib}))
    tmp.replace(folder / f"{pid}.json")


def held_mib(mem_fraction: float) -> int:
    """What a scheduler holds: its static memory fraction of the card."""
    return int(TOTAL_MIB * min(max(mem_fraction, 0.0), 1.0))
