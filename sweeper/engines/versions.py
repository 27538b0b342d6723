"""How engine flags changed between releases, as data, so a refused flag names its replacement and
the version it changed in. Checked against the `--help` of each release in tests/fixtures/help/
(SGLang 0.5.9, 0.5.16, 0.5.20, 0.5.23; vLLM 0.24.0 and 0.33.0): tests/unit/engines/test_engine_versions.py proves
every row against those texts. The installed engine's own `--help` stays the authority before a
launch; this table only explains what it refuses, and warns about deprecated flags it still takes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Sequence

ENGINE_TITLES = {"sglang": "SGLang", "vllm": "vLLM", "llamacpp": "llama.cpp", "sim": "the simulator"}


@dataclass(frozen=True)
class FlagChange:
    engine: str
    flag: str
    version: str  # the first release with the change
    change: Literal["added", "removed", "deprecated"]
    replacement: str | None = None
    value: str | None = None  # a choice of the flag, when the change is to one value

    def describe(self) -> str:
        what = f"{self.flag} {self.value}" if self.value else self.flag
        title = ENGINE_TITLES.get(self.engine, self.engine)
        release = "" if self.version == "?" else f" {self.version}"
        return f"{what} {self.change} in {title}{release}"


FLAG_CHANGES: tuple[FlagChange, ...] = (
    # SGLang: CUDA graph flags split into decode and prefill (0.5.16), the old spelling kept as an
    # alias, then removed (0.5.20); --disable-cuda-graph deprecated for a backend choice.
    FlagChange("sglang", "--cuda-graph-max-bs-decode", "0.5.16", "added"),
    FlagChange("sglang", "--cuda-graph-max-bs-prefill", "0.5.16", "added"),
    FlagChange("sglang", "--cuda-graph-backend-decode", "0.5.16", "added"),
    FlagChange("sglang", "--disable-cuda-graph", "0.5.16", "deprecated", "--cuda-graph-backend-decode disabled"),
    FlagChange("sglang", "--cuda-graph-max-bs", "0.5.20", "removed",
               "--cuda-graph-max-bs-decode / --cuda-graph-max-bs-prefill"),
    # SGLang: DP attention became a size (seen first in 0.5.23; 0.5.20 lacks it).
    FlagChange("sglang", "--attn-dp-size", "0.5.23", "added"),
    FlagChange("sglang", "--enable-dp-attention", "0.5.23", "deprecated", "--attn-dp-size N"),
    # SGLang: MoE runners and attention backends (0.5.9 has no marlin: the sm_120 FP4 path).
    FlagChange("sglang", "--moe-runner-backend", "0.5.16", "added", value="marlin"),
    FlagChange("sglang", "--moe-runner-backend", "0.5.16", "added", value="flashinfer_trtllm_routed"),
    FlagChange("sglang", "--attention-backend", "0.5.16", "added", value="dsv4"),
    FlagChange("sglang", "--moe-a2a-backend", "0.5.20", "added", value="deepep_v2"),
    # vLLM: boolean flags' negative form became --disable-X (seen first in 0.33.0; 0.24.0, run on
    # the H200, has --no-enable-X: tests/fixtures/help/vllm-0.24.0.txt; releases between
    # not read), and MoE backends added after 0.24.0
    FlagChange("vllm", "--no-enable-chunked-prefill", "0.33.0", "removed", "--disable-chunked-prefill"),
    FlagChange("vllm", "--no-enable-prefix-caching", "0.33.0", "removed", "--disable-prefix-caching"),
    FlagChange("vllm", "--disable-chunked-prefill", "0.33.0", "added"),
    FlagChange("vllm", "--disable-prefix-caching", "0.33.0", "added"),
    FlagChange("vllm", "--moe-backend", "0.33.0", "added", value="batched_triton"),
    # llama.cpp's llama-server (version of the vendored llama.cpp unknown: see llamacpp.py)
    FlagChange("llamacpp", "--mlock", "?", "removed", "-lm/--load-mode mlock"),
)


def parse_version(text: str) -> tuple[int, ...]:
    """(0, 5, 23) from '0.5.23', 'sglang 0.5.23', '0.5.23.post1' or '0.5.23-sim'; () when none."""
    match = re.search(r"(\d+(?:\.\d+)+)", text)
    return tuple(int(part) for part in match.group(1).split(".")) if match else ()


def _applies(change: FlagChange, engine: str, version: tuple[int, ...] | None) -> bool:
    if change.engine != engine:
        return False
    return version is None or not parse_version(change.version) or parse_version(change.version) <= version


def changes_for(flag: str, engine: str | None = None, value: str | None = None) -> list[FlagChange]:
    return [c for c in FLAG_CHANGES if c.flag == flag and c.value == value
            and (engine is None or c.engine == engine)]


def hint_for(flag: str, engine: str | None = None, value: str | None = None) -> str:
    """'; use X (removed in SGLang 0.5.20)' or '; added in SGLang 0.5.16' for a refused flag, or ''."""
    for change in changes_for(flag, engine, value):
        if change.replacement:
            return f"; use {change.replacement} ({change.describe()})"
        if change.change == "added":
            return f"; {change.describe()}: the installed version is older"
    return ""


def deprecation_warnings(argv: Sequence[str], engine: str, version_text: str) -> list[str]:
    """Flags in `argv` that the installed version still takes but has deprecated."""
    version = parse_version(version_text) or None
    warnings = []
    for item in argv:
        flag = item.partition("=")[0]
        for change in changes_for(flag, engine):
            if change.change == "deprecated" and _applies(change, engine, version):
                warnings.append(f"{flag} is deprecated ({change.describe()}); use {change.replacement}")
    return warnings
