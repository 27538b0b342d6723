"""Torch profiler chrome traces -> time per kernel, grouped. Pure apart from load_trace.

Format (torch.profiler's export_chrome_trace, written by kineto; SGLang's `*-TP-<rank>.trace.json.gz`
and vLLM's `*.pt.trace.json.gz` are the same format, gzipped): a JSON object whose "traceEvents"
list holds complete events {"ph": "X", "cat", "name", "pid", "tid", "ts", "dur" (microseconds),
"args"}. GPU work has cat "kernel", "gpu_memcpy" or "gpu_memset" (older kineto: "Kernel", "Memcpy",
"Memset") on the device's timeline; the CPU side has "cpu_op", "cuda_runtime", "python_function",
"user_annotation", ... which are not GPU time and are ignored when the trace has GPU events.

A CPU-only trace (no GPU events) is measured by its operators instead: cat "cpu_op" (older:
"Operator"), each counted by its SELF time (its span minus the operators nested in it on the same
thread), so aten::linear -> aten::addmm is not counted twice.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from sweeper.profile.groups import GROUPS, classify_kernel

GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"})
CPU_OP_CATEGORIES = frozenset({"cpu_op", "operator"})
SOURCE_GPU = "gpu_kernels"
SOURCE_CPU = "cpu_ops"
TRACE_SUFFIXES = (".json", ".json.gz")


class TraceError(ValueError):
    """A file that is not a torch profiler chrome trace (the message names the file)."""


@dataclass(frozen=True)
class KernelRow:
    name: str
    group: str
    total_us: float
    share: float  # of all GPU kernel time (or CPU self time) in the trace(s)
    calls: int


@dataclass(frozen=True)
class KernelTable:
    rows: list[KernelRow]  # by total time, largest first
    source: str  # gpu_kernels | cpu_ops: which events the times come from
    total_us: float
    traces: int  # how many traces were summed (one per GPU rank, for SGLang)
    devices: int  # distinct GPUs seen (0 for a CPU-only trace)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "total_us": self.total_us, "traces": self.traces,
                "devices": self.devices, "kernels": [asdict(row) for row in self.rows]}


@dataclass(frozen=True)
class GroupShare:
    group: str
    total_us: float
    share: float
    calls: int
    kernels: int  # distinct kernel names in the group
    top_kernel: str | None


def is_trace_file(name: str) -> bool:
    """SGLang's `<id>-TP-<rank>.trace.json.gz`, vLLM's `*.pt.trace.json.gz`, any `.json[.gz]`."""
    return name.endswith(TRACE_SUFFIXES)


def load_trace(path: Path | str) -> dict[str, Any]:
    """A chrome trace from .json or .json.gz (gzip is detected by content, not by name)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = json.loads(raw)
    except (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError, ValueError) as exc:
        raise TraceError(f"{path}: not a readable chrome trace ({type(exc).__name__}: {exc})") from None
    if isinstance(data, list):  # the chrome format also allows a bare array of events
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f"{path}: expected a JSON object with a 'traceEvents' list (torch profiler's format)")
    return data


def _complete_events(trace: Mapping[str, Any]) -> Iterable[dict]:
    for event in trace.get("traceEvents", ()):
        if isinstance(event, dict) and event.get("ph") == "X" and isinstance(event.get("dur"), (int, float)):
            yield event


def _category(event: Mapping[str, Any]) -> str:
    return str(event.get("cat", "")).lower()


def gpu_events(trace: Mapping[str, Any]) -> list[dict]:
    return [e for e in _complete_events(trace) if _category(e) in GPU_CATEGORIES]


def cpu_op_self_times(trace: Mapping[str, Any]) -> list[tuple[str, float]]:
    """(name, self time us) of every CPU operator: its duration minus its direct children's on
    the same thread (children are the operators that start inside it)."""
    by_thread: dict[tuple, list[dict]] = defaultdict(list)
    for event in _complete_events(trace):
        if _category(event) in CPU_OP_CATEGORIES:
            by_thread[(event.get("pid"), event.get("tid"))].append(event)
    out: list[tuple[str, float]] = []
    for events in by_thread.values():
        events.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        stack: list[list] = []  # [end, self_time, name]
        for event in events:
            start, dur = float(event["ts"]), max(float(event["dur"]), 0.0)
            while stack and stack[-1][0] <= start:
                _, self_us, name = stack.pop()
                out.append((name, self_us))
            if stack:  # nested: its time is not its parent's own
                stack[-1][1] = max(stack[-1][1] - dur, 0.0)
            stack.append([start + dur, dur, str(event.get("name", "?"))])
        out.extend((name, self_us) for _, self_us, name in stack)
    return out


@dataclass(frozen=True)
class DeviceBusy:
    trace: int  # index of the trace file
    device: Any  # the GPU's id in that trace
    busy_us: float  # time with at least one kernel/copy running (overlaps on several streams once)
    span_us: float  # first GPU event's start to the last one's end

    @property
    def busy_share(self) -> float:
        return self.busy_us / self.span_us if self.span_us > 0 else 0.0


def _busy(index: int, device: Any, intervals: list[tuple[float, float]]) -> DeviceBusy:
    intervals.sort()
    busy, end = 0.0, float("-inf")
    for start, stop in intervals:
        if stop > end:
            busy += stop - max(start, end)
            end = stop
    return DeviceBusy(index, device, round(busy, 3), round(end - intervals[0][0], 3))


def summarize_traces(traces: Mapping[str, Any] | Iterable[Mapping[str, Any]],
                     ) -> tuple[KernelTable, list[DeviceBusy]]:
    """Time per kernel name summed over one trace or several (e.g. one per TP rank), with its share
    of the total and its group, and how busy each GPU was. GPU events when any trace has them, else
    CPU operators. Each trace is read once, so a generator of loaded files keeps one in memory."""
    traces = [traces] if isinstance(traces, Mapping) else traces
    gpu: dict[str, list] = defaultdict(lambda: [0.0, 0])
    cpu: dict[str, list] = defaultdict(lambda: [0.0, 0])
    busy: list[DeviceBusy] = []
    count = 0
    for index, trace in enumerate(traces):
        count += 1
        spans: dict[Any, list[tuple[float, float]]] = defaultdict(list)
        for event in gpu_events(trace):
            name, start, dur = str(event.get("name", "?")), float(event["ts"]), float(event["dur"])
            gpu[name][0] += dur
            gpu[name][1] += 1
            spans[(event.get("args") or {}).get("device", event.get("pid"))].append((start, start + dur))
        busy += [_busy(index, device, intervals) for device, intervals in spans.items()]
        if not spans and not gpu:  # CPU operators count only while no trace has GPU events
            for name, self_us in cpu_op_self_times(trace):
                cpu[name][0] += self_us
                cpu[name][1] += 1
    source, totals = (SOURCE_GPU, gpu) if gpu else (SOURCE_CPU, cpu)
    total = sum(us for us, _ in totals.values())
    rows = [KernelRow(name, classify_kernel(name), round(us, 3), us / total if total else 0.0, calls)
            for name, (us, calls) in totals.items()]
    rows.sort(key=lambda r: (-r.total_us, r.name))
    return KernelTable(rows, source, round(total, 3), count, len(busy)), busy


def kernel_shares(traces: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> KernelTable:
    """The kernel table of summarize_traces."""
    return summarize_traces(traces)[0]


def device_busy(traces: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> list[DeviceBusy]:
    """Per GPU, how much of the profiled span had GPU work running: the rest is the GPU waiting on
    the CPU (launches, scheduling, Python) or on requests."""
    return summarize_traces(traces)[1]


def group_shares(table: KernelTable) -> list[GroupShare]:
    """Every group (zeros included), largest share first."""
    total = table.total_us
    out = []
    for group in GROUPS:
        rows = [r for r in table.rows if r.group == group]
        us = sum(r.total_us for r in rows)
        out.append(GroupShare(group, round(us, 3), us / total if total else 0.0, sum(r.calls for r in rows),
                              len(rows), rows[0].name if rows else None))
    out.sort(key=lambda g: (-g.total_us, GROUPS.index(g.group)))
    return out
