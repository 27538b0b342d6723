"""Where numbers came from: study, sweeper version, engine and its version, model, host, GPU model.
What the code cannot know is an empty string, never a guess."""

from __future__ import annotations

from datetime import datetime, timezone

import optuna

import sweeper
from sweeper.spec.space import Space

SIM_GPU_MODEL = "simulated NVIDIA RTX PRO 6000 Blackwell (sm_120, 96 GB)"
PROVENANCE_COLUMNS = ("study", "sweeper_version", "engine", "engine_version", "model", "gpu_model")


def engine_provenance(space: Space) -> dict[str, str]:
    """Study attrs for what is known when a study is created: the simulator ships with sweeper, so
    its version and (simulated) GPU are known; a real engine's are not probed yet (empty)."""
    if space.engine == "sim":
        return {"engine_version": sweeper.__version__, "gpu_model": SIM_GPU_MODEL}
    return {"engine_version": "", "gpu_model": ""}


def build_provenance(study: optuna.Study) -> dict[str, str]:
    attrs = study.user_attrs
    space = attrs.get("space", {})
    created = attrs.get("created_at")
    return {
        "study": study.study_name,
        "sweeper_version": str(attrs.get("sweeper_version", "")),
        "engine": str(space.get("engine", "")),
        "engine_version": str(attrs.get("engine_version", "")),
        "model": str(space.get("model", "")),
        "host": str(attrs.get("host_name", "")),
        "gpu_model": str(attrs.get("gpu_model", "")),
        "created_at": datetime.fromtimestamp(created, timezone.utc).isoformat(timespec="seconds")
        if isinstance(created, (int, float)) else "",
        "storage": str(attrs.get("storage", "")),
        "space_hash": str(attrs.get("space_hash", "")),
    }
