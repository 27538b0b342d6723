"""Capture real nvidia-smi outputs (idle, busy, after release) for the parser's test fixtures.

Run on a GPU machine: `python3 bench/gpu/capture_nvidia_smi.py OUTDIR`. Needs torch with CUDA.
Writes <state>.gpu.csv and <state>.apps.csv in the two query formats sweeper's GPU gate uses.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

GPU_QUERY = ["--query-gpu=index,uuid,memory.used,memory.total", "--format=csv,noheader,nounits"]
APPS_QUERY = ["--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits"]


def capture(out: Path, state: str) -> None:
    for suffix, query in (("gpu", GPU_QUERY), ("apps", APPS_QUERY)):
        text = subprocess.run(["nvidia-smi", *query], capture_output=True, text=True, check=True).stdout
        (out / f"{state}.{suffix}.csv").write_text(text)


HOLDER = "import torch, time; x = torch.empty(8 * 1024**3, dtype=torch.uint8, device='cuda'); torch.cuda.synchronize(); print('held', flush=True); time.sleep(600)"


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    capture(out, "idle")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    time.sleep(1)
    capture(out, "busy")
    holder.terminate()
    holder.wait(30)
    time.sleep(2)
    capture(out, "released")
    (out / "nvidia-smi-q.txt").write_text(subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout)


if __name__ == "__main__":
    main()
