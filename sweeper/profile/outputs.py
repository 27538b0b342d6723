"""What a profile leaves behind: profile.json (the record) and profile.txt (the table). Pure."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Mapping

from sweeper.profile.groups import GROUP_LABELS
from sweeper.profile.trace import SOURCE_GPU, DeviceBusy, GroupShare, KernelTable

SCHEMA_VERSION = 1
NAME_WIDTH = 110


def build_profile_record(meta: Mapping[str, Any], table: KernelTable, groups: list[GroupShare],
                         busy: list[DeviceBusy]) -> dict[str, Any]:
    devices = [{**asdict(b), "device": str(b.device), "busy_share": b.busy_share} for b in busy]
    return {"schema_version": SCHEMA_VERSION, **meta, "gpu_busy": devices, "groups": [asdict(g) for g in groups],
            **table.to_dict()}


def format_busy(busy: list[DeviceBusy]) -> str | None:
    """One line: how much of the profiled span the GPUs were running something."""
    if not busy:
        return None
    shares = [b.busy_share for b in busy]
    spread = f" (lowest {100 * min(shares):.1f}%)" if len(shares) > 1 else ""
    return (f"GPU busy: {100 * sum(shares) / len(shares):.1f}% of the profiled span, mean of {len(shares)} "
            f"GPU(s){spread}; the rest the GPU waited on the CPU or on requests")


def _short(name: str, width: int = NAME_WIDTH) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def describe_source(table: KernelTable) -> str:
    if table.source == SOURCE_GPU:
        return (f"GPU kernel time (kernels, memcpy, memset) summed over {table.devices} GPU(s) "
                f"in {table.traces} trace file(s)")
    return f"CPU operator self time in {table.traces} trace file(s) (no GPU events in the trace)"


def format_profile_text(title: str, table: KernelTable, groups: list[GroupShare], busy: list[DeviceBusy],
                        top: int = 15) -> str:
    lines = [title, f"measured: {describe_source(table)}: {table.total_us / 1000:.1f} ms"]
    if busy_line := format_busy(busy):
        lines.append(busy_line)
    lines.append("")
    lines.append(f"{'group':<15}{'share':>8}{'time ms':>12}{'calls':>9}  top kernel")
    for g in groups:
        lines.append(f"{GROUP_LABELS[g.group]:<15}{100 * g.share:>7.1f}%{g.total_us / 1000:>12.1f}{g.calls:>9}  "
                     f"{_short(g.top_kernel or '-', 70)}")
    lines += ["", f"top {min(top, len(table.rows))} of {len(table.rows)} kernels by share"]
    lines.append(f"{'#':>3}{'share':>8}{'time ms':>12}{'calls':>9}  {'group':<14} name")
    for rank, row in enumerate(table.rows[:top], 1):
        lines.append(f"{rank:>3}{100 * row.share:>7.1f}%{row.total_us / 1000:>12.2f}{row.calls:>9}  "
                     f"{GROUP_LABELS[row.group]:<14} {_short(row.name)}")
    return "\n".join(lines) + "\n"


def build_profile_summary(record: Mapping[str, Any], top: int = 5) -> dict[str, Any]:
    """What the study keeps of a profile (attr `profile:<trial>`), so reports need no files."""
    busy = [d["busy_share"] for d in record.get("gpu_busy", [])]
    return {
        "groups": {g["group"]: round(g["share"], 4) for g in record["groups"]},
        "top_kernels": [{"name": k["name"], "group": k["group"], "share": round(k["share"], 4)}
                        for k in record["kernels"][:top]],
        "source": record["source"], "concurrency": record.get("concurrency"),
        "seconds": record.get("load", {}).get("seconds"), "started_at": record.get("started_at"),
        "gpu_busy": round(sum(busy) / len(busy), 4) if busy else None,
    }
