"""Per-trial GPU memory of a study, as a Markdown table: MiB used on each GPU before the launch, at
the end of the load (still serving), and once the gate saw it released, from each trial folder's
gpu_memory.json and outcome.json (written by sweeper's trial pipeline).

    python3 bench/gpu/gpu_memory_table.py RESULTS/STUDY
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def format_mib(points: dict | None) -> str:
    return " / ".join(f"{mib:,}" for _, mib in sorted((points or {}).items())) or "-"


def rows(study_dir: Path) -> list[str]:
    lines = ["| trial | config | result | before MiB | serving MiB | after MiB | back at baseline | release s |",
             "|---|---|---|---|---|---|---|---|"]
    trials = sorted((p for p in (study_dir / "trials").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    for trial in trials:
        memory_file, outcome_file = trial / "gpu_memory.json", trial / "outcome.json"
        if not memory_file.exists():
            continue
        memory = json.loads(memory_file.read_text())
        outcome = json.loads(outcome_file.read_text()) if outcome_file.exists() else {}
        config = ", ".join(f"{k}={v}" for k, v in (outcome.get("config") or {}).items() if v not in (None, False))
        failure = outcome.get("failure")
        result = (f"{failure['stage']}/{failure['kind']}" if failure
                  else f"{outcome['value']:.0f} tok/s" if isinstance(outcome.get("value"), (int, float)) else "?")
        before, after = memory.get("before", {}), memory.get("after")
        back = "yes" if after is not None and all(after.get(k, 0) <= v + 1024 for k, v in before.items()) else "no"
        release = (outcome.get("stage_seconds") or {}).get("gpu_release")
        lines.append(f"| {trial.name} | {config or '-'} | {result} | {format_mib(before)} | "
                     f"{format_mib(memory.get('serving'))} | {format_mib(after)} | {back} | "
                     f"{'-' if release is None else f'{release:.1f}'} |")
    return lines


if __name__ == "__main__":
    print("\n".join(rows(Path(sys.argv[1]))))
