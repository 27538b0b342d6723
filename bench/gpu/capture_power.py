"""Capture real nvidia-smi power readings (idle, under a bf16 matmul loop, after) for the energy
parser's test fixtures.

Run on a GPU machine: `python3 bench/gpu/capture_power.py OUTDIR`. Needs torch with CUDA.
Writes power.<state>.csv (one sample of sweeper's POWER_QUERY each), power.series.csv (a sample every
0.25 s through the run, each line prefixed by its seconds since the start) and power.fields.txt
(which power fields this driver answers).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

POWER_QUERY = ["--query-gpu=index,uuid,power.draw", "--format=csv,noheader,nounits"]
FIELDS = ("power.draw", "power.draw.average", "power.draw.instant", "power.limit", "enforced.power.limit")
LOAD = ("import torch, time; a = torch.randn(8192, 8192, dtype=torch.bfloat16, device='cuda'); "
        "print('busy', flush=True); t = time.time()\n"
        "while time.time() - t < 12:\n    b = a @ a\ntorch.cuda.synchronize()")


def query(args: list[str]) -> str:
    return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True).stdout


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    fields = []
    for field in FIELDS:
        result = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader,nounits"],
                                capture_output=True, text=True)
        fields.append(f"{field}: rc={result.returncode} {result.stdout.strip() or result.stderr.strip()}")
    (out / "power.fields.txt").write_text("\n".join(fields) + "\n")
    (out / "power.idle.csv").write_text(query(POWER_QUERY))
    start = time.monotonic()
    series = []
    load = subprocess.Popen([sys.executable, "-c", LOAD], stdout=subprocess.PIPE, text=True)
    assert load.stdout.readline().strip() == "busy"
    busy_taken = False
    while load.poll() is None or time.monotonic() - start < 18:
        text = query(POWER_QUERY)
        series += [f"{time.monotonic() - start:.2f}, {line}" for line in text.splitlines()]
        if not busy_taken and time.monotonic() - start > 6:
            (out / "power.busy.csv").write_text(text)
            busy_taken = True
        time.sleep(0.25)
    (out / "power.series.csv").write_text("\n".join(series) + "\n")
    (out / "power.after.csv").write_text(query(POWER_QUERY))
    (out / "nvidia-smi-q-power.txt").write_text(query(["-q", "-d", "POWER"]))


if __name__ == "__main__":
    main()
