"""The host half of `load_from: host`: one level run on the GPU host itself, next to the server.

loadgen/onhost.py ships this module with the client's own (client, endpoints, http1, sockio, lag, sse:
standard library only) and runs it with the host's python. It reads one request as JSON on
stdin and writes the run as JSON on stdout: the raw samples, the wall span and the loop lag,
exactly what the controller would have measured had it run the level itself.
"""

from __future__ import annotations

import json
import platform
import sys
from dataclasses import asdict
from typing import IO

from sweeper.loadgen import client
from sweeper.loadgen.client import StreamOptions, event_loop_name, run_closed_loop, run_measured, run_open_loop


def main(stdin: IO[bytes]) -> int:
    request = json.loads(stdin.read())
    options = StreamOptions(**request["options"])
    if request.get("offsets") is not None:  # an open loop: send times, the concurrency its cap (0: none)
        run = run_measured(run_open_loop(
            request["url"], request["model"], request["prompts"], request["output_len"], request["offsets"],
            max_concurrency=request["concurrency"] or None, options=options))
    else:
        run = run_measured(run_closed_loop(
            request["url"], request["model"], request["prompts"], request["output_len"],
            request["concurrency"], options=options))
    ran = {"python": sys.executable, "version": platform.python_version(), "client": client.__file__,
           "loop": event_loop_name()}
    json.dump({"samples": [asdict(s) for s in run.samples], "start": run.start, "end": run.end,
               "lag": asdict(run.lag), "ran": ran,
               "turnarounds_s": run.turnarounds_s}, sys.stdout)
    return 0
