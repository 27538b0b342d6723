"""Where load runs (hosts.yaml `load_from`): from the controller, or on the GPU host itself.

From the controller, every byte crosses the network (and, by default, the SSH port forward): the
round trip lands in every TTFT and the forward's pumps can cap what streams through. On the host,
the client's modules (standard library only) are shipped over SSH and run with the host's python,
next to the server; its raw samples come back as JSON and enter the same metrics record. `auto`
(the default) loads from the host when the host's python is 3.9 or newer, else from the
controller.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from sweeper.errors import InfraError, UserError
from sweeper.loadgen.client import LevelRun, RequestSample, StreamOptions, run_level, run_measured, run_open_loop
from sweeper.loadgen.lag import LagStats

# The modules the host needs, relative to the package root's parent: standard library only.
SHIPPED = ("sweeper/__init__.py", "sweeper/loadgen/__init__.py", "sweeper/loadgen/client.py",
           "sweeper/loadgen/endpoints.py", "sweeper/loadgen/http1.py", "sweeper/loadgen/sockio.py",
           "sweeper/loadgen/lag.py", "sweeper/loadgen/sse.py", "sweeper/loadgen/stream.py",
           "sweeper/loadgen/hostmain.py")

# Run with `python -c`: the first stdin line is the modules, the rest the request. They go into a
# private temporary folder put first on sys.path (so an installed sweeper, if any, is not used),
# which is removed afterwards.
BOOTSTRAP = """\
import json, os, shutil, sys, tempfile
sys.dont_write_bytecode = True
modules = json.loads(sys.stdin.buffer.readline())
root = tempfile.mkdtemp(prefix="sweeper-load-")
try:
    for rel, text in modules.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as out:
            out.write(text)
    sys.path.insert(0, root)
    from sweeper.loadgen.hostmain import main
    code = main(sys.stdin.buffer)
finally:
    shutil.rmtree(root, ignore_errors=True)
sys.exit(code)
"""
PROBE = "import sys; print(sys.version_info[:2] >= (3, 9))"
NOT_FOUND = 127  # the shell's exit status for a command it cannot find
SLACK_S = 60.0  # beyond the requests' own time limits: python start, imports, the answer's transfer

# prompts, output_len, C, options, until (client.run_closed_loop's stop condition, or None), and
# offsets: an open loop's send times (wall s), C then its cap in flight (0: none); None: closed
LevelRunner = Callable[..., LevelRun]
# A precise level loaded from the host: its stop rule needs scipy on the controller, so the host
# sends a fixed list (max_requests, else this many rounds) and the CI is computed afterwards.
HOST_PRECISE_ROUNDS = 40


@dataclass(frozen=True)
class LoadPlace:
    """Where a trial's levels run (`controller` or `host`) and the function that runs one."""

    where: str
    run: LevelRunner


class PythonHost(Protocol):
    name: str

    def run_python(self, source: str, stdin: bytes, timeout_s: float) -> Any: ...  # CommandResult

    def python(self) -> str: ...


def build_bundle(root: Path = Path(__file__).resolve().parents[2]) -> dict[str, str]:
    return {rel: (root / rel).read_text(encoding="utf-8") for rel in SHIPPED}


def build_host_stdin(bundle: dict[str, str], request: dict) -> bytes:
    return (json.dumps(bundle) + "\n" + json.dumps(request)).encode()


def build_request(url: str, model: str, prompts: list, output_len: int, concurrency: int,
                  options: StreamOptions, offsets: list[float] | None = None) -> dict:
    return {"url": url, "model": model, "prompts": prompts, "output_len": output_len,
            "concurrency": concurrency, "options": asdict(options), "offsets": offsets}


def run_timeout_s(n_prompts: int, concurrency: int, options: StreamOptions,
                  offsets: list[float] | None = None) -> float:
    """The longest a level can take: each round of requests is bounded by the request timeout
    (an open loop's rounds start after its last send time)."""
    last_send = offsets[-1] if offsets else 0.0
    return last_send + math.ceil(n_prompts / max(concurrency, 1)) * options.timeout_s + SLACK_S


def parse_host_run(host: str, python: str, returncode: int, stdout: str, stderr: str) -> LevelRun:
    """The host's answer as the LevelRun the controller would have measured; a host python that
    is missing or too old is the user's to fix (UserError), anything else an infrastructure fault."""
    if returncode != 0 or not stdout.strip():
        tail = (stderr.strip().splitlines() or [f"exit {returncode}, no output"])[-1]
        if returncode == NOT_FOUND or "SyntaxError" in stderr:
            raise UserError(f"host {host!r}: load_from: host needs python >= 3.9 on the host "
                            f"({python}): {tail}; set hosts.{host}.python, or load_from: controller")
        raise InfraError(f"host {host!r}: the load run on the host failed (exit {returncode}): {tail}")
    try:
        answer = json.loads(stdout)
        samples = [RequestSample(**sample) for sample in answer["samples"]]
        return LevelRun(samples, float(answer["start"]), float(answer["end"]), LagStats(**answer["lag"]),
                        dict(answer.get("ran") or {}), turnarounds_s=answer.get("turnarounds_s"))
    except (ValueError, KeyError, TypeError) as exc:
        raise InfraError(f"host {host!r}: unreadable answer from the load run on the host: "
                         f"{type(exc).__name__}: {stdout[:200]!r}") from None


def host_runner(host: PythonHost, port: int, model: str) -> LevelRunner:
    """Runs each level on the host against the server's own port there (never the forward)."""
    bundle = build_bundle()

    def run(prompts, output_len: int, concurrency: int, options: StreamOptions, until=None,
            offsets: list[float] | None = None) -> LevelRun:
        if until is not None:
            prompts = list(itertools.islice(prompts, until.max_requests or HOST_PRECISE_ROUNDS * concurrency))
        request = build_request(f"http://127.0.0.1:{port}", model, prompts, output_len, concurrency, options,
                                offsets)
        result = host.run_python(BOOTSTRAP, build_host_stdin(bundle, request),
                                 run_timeout_s(len(prompts), concurrency, options, offsets))
        return parse_host_run(host.name, host.python(), result.returncode, result.stdout, result.stderr)

    return run


def controller_runner(base_url: str, model: str) -> LevelRunner:
    def run(prompts, output_len: int, concurrency: int, options: StreamOptions, until=None,
            offsets: list[float] | None = None) -> LevelRun:
        if offsets is not None:
            return run_measured(run_open_loop(base_url, model, prompts, output_len, offsets,
                                              max_concurrency=concurrency or None, options=options))
        return run_level(base_url, model, prompts, output_len, concurrency, options=options, until=until)

    return run


def host_can_load(host: PythonHost) -> bool:
    """Whether the host's python is there and new enough for the client."""
    result = host.run_python(PROBE, b"", 60.0)
    return result.returncode == 0 and result.stdout.strip() == "True"


def resolve_load_from(setting: str, transport: str, probe: Callable[[], bool]) -> str:
    """controller or host. A local host is the controller. `auto` asks the host (probe)."""
    if transport != "ssh" or setting == "controller":
        return "controller"
    if setting == "host":
        return "host"
    return "host" if probe() else "controller"


_probed: dict[str, bool] = {}  # host name -> its python can run the client (asked once per process)


def load_place(host: Any, setting: str, transport: str, port: int, model: str) -> LoadPlace:
    """Where this trial's load runs, per the host's `load_from`, and how."""
    def probe() -> bool:
        if host.name not in _probed:
            _probed[host.name] = host_can_load(host)
        return _probed[host.name]

    if resolve_load_from(setting, transport, probe) == "host":
        return LoadPlace("host", host_runner(host, port, model))
    return LoadPlace("controller", controller_runner(host.base_url(port), model))
