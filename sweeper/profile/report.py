"""What a profile leaves behind: profile.json (the record) and profile.txt (the table). Pure."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Mapping

from sweeper.profile.groups import GROUP_LABELS
from sweeper.profile.trace import SOURCE_GPU, GroupShare, KernelTable

SCHEMA_VERSION = 1
NAME_WIDTH = 110


def build_profile_record(meta: Mapping[str, Any], table: KernelTable, groups: list[GroupShare]) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, **meta, "groups": [asdict(g) for g in groups], **table.to_dict()}


def _short(name: str, width: int = NAME_WIDTH) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def describe_source(table: KernelTable) -> str:
    if table.source == SOURCE_GPU:
        return (f"GPU kernel time (kernels, memcpy, memset) summed over {table.devices} GPU(s) "
                f"in {table.traces} trace file(s)")
    return f"CPU operator self time in {table.traces} trace file(s) (no GPU events in the trace)"


def format_profile_text(title: str, table: KernelTable, groups: list[GroupShare], top: int = 15) -> str:
    lines = [title, f"measured: {describe_source(table)}: {table.total_us / 1000:.1f} ms", ""]
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
