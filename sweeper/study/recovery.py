"""Servers a dead controller left behind, found by the launch intents the study holds.

Every launch writes its intent (host, run token, run folder on the host) into the study before
the host spawns anything (trial/launch.py), so whatever the moment a controller died (before the
spawn, between the spawn and the record of the process, during the load, during the stop) the next
one finds its server: every process on the host that carries the token in its environment, and
the group the run folder's process.json names. Only groups holding a process with our token are
signalled (hosts/agent.py stop_group), never anything found by name.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Iterable, Mapping

from optuna.trial import FrozenTrial

from sweeper.hosts.base import Host, LaunchIntent, ServerProcess

INTENT_ATTR = "launch_intent"  # a trial's: written before its server is spawned


def build_intent_attr(intent: LaunchIntent, trial: int) -> dict:
    return {**intent.to_dict(), "trial": trial}


def intent_of_record(record: Mapping) -> LaunchIntent:
    """The intent a process record implies (a study from before intents recorded only these)."""
    return LaunchIntent(host=record["host"], token=record["token"], run_dir=posixpath.dirname(record["log_path"]))


@dataclass(frozen=True)
class TrialLaunch:
    trial: int
    intent: LaunchIntent
    recorded: bool  # the spawned process was recorded too (a `process` attr)


def trial_launches(trials: Iterable[FrozenTrial], host_name: str) -> dict[str, TrialLaunch]:
    """token -> the launch these trials intended on `host_name`."""
    found: dict[str, TrialLaunch] = {}
    for t in trials:
        recorded = t.user_attrs.get("process")
        for data, build in ((t.user_attrs.get(INTENT_ATTR), LaunchIntent.from_dict), (recorded, intent_of_record)):
            if data and data.get("host") == host_name and data.get("token") and data["token"] not in found:
                found[data["token"]] = TrialLaunch(t.number, build(data), bool(recorded))
    return found


def stop_found_servers(host: Host, intents: list[LaunchIntent], grace_s: float) -> list[ServerProcess]:
    """Stop every live server group of these intents; returns the groups that were running."""
    stopped = []
    for proc in host.find_servers(intents):
        if host.stop_group(proc, grace_s).was_running:
            stopped.append(proc)
    return stopped


def stop_leftover_servers(host: Host, trials: list[FrozenTrial], grace_s: float) -> list[str]:
    """Stop the live servers of these trials' launches on `host`; one note per server stopped."""
    launches = trial_launches(trials, host.name)
    notes = []
    for proc in stop_found_servers(host, [launch.intent for launch in launches.values()], grace_s):
        launch = launches[proc.token]
        how = "" if launch.recorded else ", found by its run token: its start was never recorded"
        notes.append(f"stopped the server of trial {launch.trial} (pgid {proc.pgid}{how})")
    return notes
