"""What a trial's stages share: its context (what it runs on, the callbacks), its outcome, and a
Failure (the stage and kind of a config-caused failure, recorded as data)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from sweeper.engines.adapter import Engine
from sweeper.hosts.base import Host, LaunchIntent, ServerProcess
from sweeper.outcomes import FailureKind, Stage
from sweeper.spec.hosts import HostSpec
from sweeper.spec.space import Space
from sweeper.trial.gate import OutputSample


@dataclass(frozen=True)
class Failure:
    stage: Stage
    kind: FailureKind  # StrEnums: a stored record holds their plain string values
    message: str
    log_tail: str = ""


@dataclass
class TrialOutcome:
    config: dict[str, Any]
    failure: Failure | None = None
    levels: dict[int, dict] = field(default_factory=dict)
    # objective max_load_within_slo: the search's record (loadgen/capacity.capacity_record)
    capacity: dict | None = None
    output_text: str | None = None  # the first check prompt's greedy answer
    output_samples: list[dict] | None = None  # every check prompt's answer (correctness.OutputSample)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    launched: bool = False
    # MiB used per GPU index before the launch, at the end of the load, and once released
    gpu_memory: dict[str, dict[str, int]] | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None


@dataclass(frozen=True)
class TrialContext:
    space: Space
    engine: Engine
    host: Host
    host_spec: HostSpec
    trial_dir: Path
    reference_samples: Sequence[OutputSample] | None = None  # the study's reference outputs
    on_stage: Callable[[str], None] = lambda stage: None
    # Called before the spawn: must have stored the intent when it returns (recovery reads it).
    on_intent: Callable[[LaunchIntent], None] = lambda intent: None
    on_started: Callable[[ServerProcess], None] = lambda proc: None
    # Judges each measured level; a Failure returned stops the ladder (SLO broken, abandoned).
    on_level: Callable[[int, dict], "Failure | None"] = lambda level, metrics: None
    known_servers: Callable[[], list[ServerProcess]] = lambda: []  # this study's, for the GPU gate
    known_flags: Mapping[str, list[str] | None] | None = None  # the installed engine's --help
    avoid_ports: frozenset[int] = frozenset()  # base ports a clash was seen on (a retried trial's)
