"""A study remembers the space it was created with; resuming under an edited space is refused,
since changed choices would corrupt the sampler's history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sweeper.spec.space import Space, space_fingerprint
from sweeper.spec.space_file import load_space
from sweeper.errors import UserError
from sweeper.study.stored import parse_stored_space


def changed_paths(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Key paths whose values differ between two parsed documents."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new), key=str):
            path = f"{prefix}.{key}" if prefix else str(key)
            if key not in old:
                out.append(f"{path} (added)")
            elif key not in new:
                out.append(f"{path} (removed)")
            else:
                out += changed_paths(old[key], new[key], path)
        return out
    return [] if old == new else [prefix or "<top>"]


def check_space_unchanged(study_attrs: dict) -> Space:
    """The space to resume with: the original file if it still matches, the stored copy if the
    file is gone; an edited file is refused with what changed."""
    path = Path(study_attrs["space_path"])
    if not path.is_file():
        return parse_stored_space(study_attrs)
    space = load_space(path)
    if space_fingerprint(space) == study_attrs["space_hash"]:
        return space
    changes = changed_paths(study_attrs["space"], space.model_dump(mode="json"))
    raise UserError(
        f"{path} changed since the study was created ({', '.join(changes[:8])}); resuming would "
        f"corrupt the sampler's history. Restore the file, or start a new study version: "
        f"sweeper sweep {path} --study <name>-v2")
