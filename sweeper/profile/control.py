"""How each engine's torch profiler is switched on: an environment variable at launch (the
folder traces are written to) and two HTTP endpoints while it serves.

- SGLang (and the simulator, which copies it): SGLANG_TORCH_PROFILER_DIR, POST /start_profile with
  a JSON body (activities, with_stack, record_shapes), POST /stop_profile; every TP rank writes
  `<id>-TP-<rank>.trace.json.gz` into the folder when the profiler stops.
- vLLM before 0.24: VLLM_TORCH_PROFILER_DIR (the endpoints exist only when it is set at launch),
  POST /start_profile and /stop_profile without a body; workers write `*.pt.trace.json.gz`,
  possibly a while after /stop_profile returns.
- vLLM 0.24 and 0.33: the variable is gone ("Unknown vLLM environment variable detected:
  VLLM_TORCH_PROFILER_DIR", then /start_profile answers 404); the profiler is a launch flag,
  `--profiler-config '{"profiler": "torch", "torch_profiler_dir": DIR}'` (DIR made absolute against
  the server's working folder), the endpoints as before. Seen on the H200 with 0.24.0; listed in
  both help fixtures (tests/fixtures/help/vllm-0.24.0.txt, tests/fixtures/help/vllm-0.33.0.txt).
  Which one a host gets follows the installed version (PROFILERS_BY_VERSION).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import json

import requests

from sweeper.loadgen.direct import post_direct
from sweeper.errors import UserError
from sweeper.engines.versions import parse_version

# Relative to the server's working folder (its trial folder on the host), so the same value works
# locally and over SSH; both engines resolve it against their working directory.
TRACE_SUBDIR = "traces"


@dataclass(frozen=True)
class ProfilerControl:
    env_var: str | None  # names the trace folder at launch; None where a flag does
    start_path: str = "/start_profile"
    stop_path: str = "/stop_profile"
    start_body: dict[str, Any] | None = field(default=None)
    body_dir_key: str | None = None  # the start body's key for the trace folder, where it has one
    config_flag: str | None = None  # a launch flag taking a JSON config instead of the variable
    config: dict[str, Any] | None = None  # that JSON; config_dir_key names the folder in it
    config_dir_key: str | None = None

    def build_start_body(self, trace_dir: str) -> dict[str, Any] | None:
        """The start request; the folder is named again where the engine takes it, so the traces
        land there whatever the engine's working directory."""
        if self.body_dir_key is None:
            return self.start_body
        return {**(self.start_body or {}), self.body_dir_key: trace_dir}


SGLANG_PROFILER = ProfilerControl(
    env_var="SGLANG_TORCH_PROFILER_DIR",
    # No Python stacks or shapes: they multiply the trace size and the kernel table needs neither.
    start_body={"activities": ["CPU", "GPU"], "with_stack": False, "record_shapes": False},
    body_dir_key="output_dir",
)
VLLM_PROFILER = ProfilerControl(env_var="VLLM_TORCH_PROFILER_DIR")
VLLM_PROFILER_CONFIG = ProfilerControl(
    env_var=None, config_flag="--profiler-config", config_dir_key="torch_profiler_dir",
    # no Python stacks (0.24 records them by default): they multiply the trace size
    config={"profiler": "torch", "torch_profiler_with_stack": False})

PROFILERS = {"sglang": SGLANG_PROFILER, "sim": SGLANG_PROFILER, "vllm": VLLM_PROFILER_CONFIG}
# (engine, first release, control): the newest row at or below the installed version applies;
# an unknown version gets PROFILERS' (the newest spelling).
PROFILERS_BY_VERSION: tuple[tuple[str, tuple[int, ...], ProfilerControl], ...] = (
    ("vllm", (0,), VLLM_PROFILER),
    ("vllm", (0, 24), VLLM_PROFILER_CONFIG),
)


def profiler_for(engine: str, version_text: str = "") -> ProfilerControl:
    """The profiler switch of `engine` at the installed version ('0.24.0'; '' when not known)."""
    if engine not in PROFILERS:
        raise UserError(f"engine {engine!r} has no torch profiler endpoint; `sweeper profile` supports "
                        f"{', '.join(sorted(PROFILERS))}")
    version = parse_version(version_text)
    rows = [(since, control) for name, since, control in PROFILERS_BY_VERSION if name == engine]
    if version and rows:
        return max(((since, c) for since, c in rows if since <= version), key=lambda row: row[0])[1]
    return PROFILERS[engine]


def build_profiler_env(control: ProfilerControl) -> dict[str, str]:
    return {control.env_var: TRACE_SUBDIR} if control.env_var else {}


def build_profiler_argv(control: ProfilerControl) -> list[str]:
    """Launch flags that switch the profiler on (with the trace folder), where the engine has them."""
    if not control.config_flag:
        return []
    return [control.config_flag, json.dumps({**(control.config or {}), control.config_dir_key: TRACE_SUBDIR})]


class ProfilerRequestFailed(UserError):
    pass


def call_profiler(base_url: str, path: str, body: dict[str, Any] | None, timeout_s: float) -> str:
    """POST a profiler endpoint; its answer text, or a clear error with the server's words."""
    try:
        answer = post_direct(base_url + path, body, timeout_s)
    except requests.RequestException as exc:
        raise ProfilerRequestFailed(f"POST {path} failed: {type(exc).__name__}: {exc}") from None
    if answer.status_code != 200:
        raise ProfilerRequestFailed(f"POST {path} answered {answer.status_code}: {answer.text.strip()[:300]}")
    return answer.text.strip()
