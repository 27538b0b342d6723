"""The launch script and remote folder layout of an SSH trial. Pure builders: no I/O."""

from __future__ import annotations

import json
import posixpath
import shlex
from pathlib import PurePath
from typing import Mapping, Sequence

from sweeper.redact import MASK, redact_env


def build_remote_run_dir(work_dir: str, local_trial_dir: str) -> str:
    """`<work_dir>/<study>/<trial>` from the local `results/<study>/trials/<trial>` folder
    (`<work_dir>/<study>/<trial>/profile` from `.../trials/<trial>/profile`)."""
    local = PurePath(local_trial_dir)
    parts = local.parts
    if "trials" in parts[1:-1]:
        at = len(parts) - 1 - parts[::-1].index("trials")
        return posixpath.join(work_dir, parts[at - 1], *parts[at + 1:])
    study = local.parent.parent.name if local.parent.name == "trials" else local.parent.name
    return posixpath.join(work_dir, study or "study", local.name)


def build_launch_script(argv: Sequence[str], env: Mapping[str, str]) -> str:
    """A runnable script: non-secret variables exported, then `exec` of the argv, every value
    quoted with shlex. Secret variables are not written: they reach the server through its
    process environment only."""
    shown = redact_env(env)
    exports = "".join(f"export {name}={shlex.quote(value)}\n"
                      for name, value in sorted(shown.items()) if value != MASK or env[name] == MASK)
    return ("#!/bin/sh\n# written by sweeper; secret variables are passed in the environment, not here\n"
            + exports + "exec " + shlex.join(argv) + "\n")


def build_env_json(env: Mapping[str, str]) -> str:
    return json.dumps(redact_env(env), indent=2, sort_keys=True)
