"""The xdist workers' port ranges (tests/support/ports.py) hold every fixed base port the tests use,
with the ports a sweep takes above it, and do not overlap."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.ports import FIXED_BASES, SWEEP_REACH, WORKER_RANGES, worker_port

TESTS = Path(__file__).resolve().parents[1]


def fixed_bases_in_tests() -> set[int]:
    return {int(port) for path in TESTS.rglob("*.py")
            for port in re.findall(r"\bworker_port\((\d+)\)", path.read_text())}


def test_every_fixed_base_lies_within_the_declared_span():
    bases = fixed_bases_in_tests()
    assert len(bases) > 5  # the scan found the tests' calls
    assert FIXED_BASES[0] <= min(bases) and max(bases) <= FIXED_BASES[1], sorted(bases)


def test_the_workers_ranges_are_disjoint_and_unprivileged(monkeypatch):
    ranges = []
    for worker in range(WORKER_RANGES):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{worker}")
        ranges.append(range(worker_port(FIXED_BASES[0]), worker_port(FIXED_BASES[1]) + SWEEP_REACH))
    for i, one in enumerate(ranges):
        assert one.start > 1024
        assert all(set(one).isdisjoint(other) for other in ranges[i + 1:]), (one, ranges)
