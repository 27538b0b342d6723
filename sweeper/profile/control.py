"""How each engine's torch profiler is switched on: an environment variable at launch (the
folder traces are written to) and two HTTP endpoints while it serves.

- SGLang (and the simulator, which copies it): SGLANG_TORCH_PROFILER_DIR, POST /start_profile with
  a JSON body (activities, with_stack, record_shapes), POST /stop_profile; every TP rank writes
  `<id>-TP-<rank>.trace.json.gz` into the folder when the profiler stops.
- vLLM: VLLM_TORCH_PROFILER_DIR (the endpoints exist only when it is set at launch), POST
  /start_profile and /stop_profile without a body; workers write `*.pt.trace.json.gz`, possibly a
  while after /stop_profile returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import requests

from sweeper.loadgen.direct import post_direct
from sweeper.errors import UserError

# Relative to the server's working folder (its trial folder on the host), so the same value works
# locally and over SSH; both engines resolve it against their working directory.
TRACE_SUBDIR = "traces"


@dataclass(frozen=True)
class ProfilerControl:
    env_var: str
    start_path: str = "/start_profile"
    stop_path: str = "/stop_profile"
    start_body: dict[str, Any] | None = field(default=None)
    body_dir_key: str | None = None  # the start body's key for the trace folder, where it has one

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

PROFILERS = {"sglang": SGLANG_PROFILER, "sim": SGLANG_PROFILER, "vllm": VLLM_PROFILER}


def profiler_for(engine: str) -> ProfilerControl:
    try:
        return PROFILERS[engine]
    except KeyError:
        raise UserError(f"engine {engine!r} has no torch profiler endpoint; `sweeper profile` supports "
                        f"{', '.join(sorted(PROFILERS))}") from None


def build_profiler_env(control: ProfilerControl) -> dict[str, str]:
    return {control.env_var: TRACE_SUBDIR}


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
