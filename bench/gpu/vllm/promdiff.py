"""The side-by-side table: per level, what `vllm bench serve` and `sweeper load` measured on the same
server, and what the server's own /metrics histograms say happened while each ran (the referee).

    python3 bench/gpu/vllm/promdiff.py SERVER_DIR      (capture.py's output folder)

runs.json names, for each client's run, the /metrics scrapes taken just before and after it: their
difference is what the server saw during that run (its requests only: nothing else talks to it).
Prints a Markdown table.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

LINE = re.compile(r'^(vllm:[a-z0-9_]+)(\{[^}]*\})?\s+([-+0-9.eEinfINFNa]+)$')


def parse_metrics(text: str) -> dict[str, float]:
    """Sum of each series over its labels (one model, one engine: the labels do not split it)."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        match = LINE.match(line.strip())
        if not match:
            continue
        name, labels, value = match.groups()
        if name.endswith("_bucket"):
            le = re.search(r'le="([^"]+)"', labels or "")
            name = f"{name}[{le.group(1) if le else '?'}]"
        totals[name] = totals.get(name, 0.0) + float(value)
    return totals


def server_view(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)
    view = {"requests": delta("vllm:time_to_first_token_seconds_count"),
            "generation_tokens": delta("vllm:generation_tokens_total")}
    for key, metric in (("ttft_ms", "vllm:time_to_first_token_seconds"),
                        ("itl_ms", "vllm:inter_token_latency_seconds"),
                        ("e2e_ms", "vllm:e2e_request_latency_seconds")):
        count = delta(metric + "_count")
        view[key] = 1000 * delta(metric + "_sum") / count if count else float("nan")
    return view


def load(path: Path) -> dict:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return data[0] if isinstance(data, list) and data else data


def rows(folder: Path) -> list[str]:
    out = ["| C | client | client tok/s | client TTFT mean ms | client ITL mean ms | server TTFT mean ms | "
           "server ITL mean ms | server e2e mean ms | server gen tokens | requests |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    manifest = folder / "runs.json"
    for run in json.loads(manifest.read_text()) if manifest.is_file() else []:
        before, after = (parse_metrics((folder / run[k]).read_text()) for k in ("before", "after"))
        view = server_view(before, after)
        result = load(folder / run["result"])
        out.append(f"| {run['c']} | {run['client']} | {result.get('output_throughput', float('nan')):.0f} | "
                   f"{result.get('mean_ttft_ms', float('nan')):.2f} | {result.get('mean_itl_ms', float('nan')):.3f} | "
                   f"{view['ttft_ms']:.2f} | {view['itl_ms']:.3f} | {view['e2e_ms']:.1f} | "
                   f"{view['generation_tokens']:.0f} | {view['requests']:.0f} |")
    return out


if __name__ == "__main__":
    print("\n".join(rows(Path(sys.argv[1]))))
