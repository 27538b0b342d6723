"""The winner as a ready-to-run launch script, rebuilt from storage (no GPU, no re-run)."""

from __future__ import annotations

import shlex
import sys

import optuna
from optuna.trial import FrozenTrial

from sweeper.spec.hosts import HostSpec
from sweeper.spec.space import Space
from sweeper.engines import get_engine
from sweeper.redact import redact_env, redacted_command_line
from sweeper.results.answer import build_answer, format_answer_lines
from sweeper.results.ranking import best_ranked_trial
from sweeper.results.leaderboard import format_values


def format_launch_script(space: Space, host_name: str, host_spec: HostSpec, params: dict,
                         python: str, port: int, header: str) -> str:
    """A bash script that starts the server with these parameters; every value is quoted and
    secret values (of secret-looking variables and flags) are left as placeholders to fill in.
    `header`: comment lines (one per line of it)."""
    spec = get_engine(space.engine).build_launch_spec(space, params, host_spec, port, python)
    env = redact_env(spec.env)
    lines = ["#!/usr/bin/env bash", *(f"# {line}" for line in header.splitlines()), f"# host: {host_name}",
             "set -euo pipefail"]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items())]
    lines.append("exec " + redacted_command_line(spec.argv))
    return "\n".join(lines) + "\n"


def best_launch_script(study: optuna.Study, space: Space, host_spec: HostSpec,
                       trial: FrozenTrial | None = None) -> str | None:
    """The launch script of `trial`, by default the best: rank 1 of the leaderboard (a validated
    finalist ranks by its re-runs' mean; in the Pareto mode the front's best throughput). The
    header of the study's answer (results/answer.py) says its validated mean and CI, on how many
    launches, and the tie, as `best` does; another trial's, its sweep values."""
    best = trial or best_ranked_trial(study)
    if best is None:
        return None
    attrs = study.user_attrs
    answer = build_answer(study)
    if answer is not None and answer.trial == best.number:
        winner, *more = format_answer_lines(answer)
        header = "\n".join([f"best of study {study.study_name}, {winner}", *more,
                            "written by sweeper; *** marks secrets to fill in"])
    else:
        which = "best" if trial is None else "chosen"
        header = (f"{which} of study {study.study_name}: trial {best.number}, {format_values(study, best)}"
                  " (written by sweeper; *** marks secrets to fill in)")
    # The same interpreter a sweep would use: the host's, or this one for the local host.
    python = host_spec.python or (sys.executable if host_spec.transport == "local" else "python3")
    return format_launch_script(space, attrs.get("host_name", "?"), host_spec, dict(best.params),
                                python, host_spec.base_port, header)
