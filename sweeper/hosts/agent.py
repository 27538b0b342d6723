"""The remote half of the SSH transport: a small stdlib-only program run on the host for each
operation (`python -S -c <source>`, a JSON request on stdin, a JSON answer on stdout).

It is shipped as text together with procfs.py (build_agent_source), so the host reads /proc with
exactly the rules LocalHost uses. Nothing in a request ever reaches a shell: values arrive as JSON,
and the launch script the controller generated has every value quoted with shlex.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from sweeper.hosts.procfs import (
    environ_has, environ_value, listening_inodes, live_group_members, read_cmdline, read_environ,
    read_stat, signal_server_group, socket_inodes_of, still_running,
)

TOKEN_VAR = "SWEEPER_RUN_TOKEN"
LOG_CHUNK = 1 << 20


def _write(path: Path, text: str, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(path, mode)


def op_start(req: dict) -> dict:
    """Write the trial folder, start launch.sh in a new session, record PID/PGID/start time."""
    run_dir = Path(os.path.expanduser(req["run_dir"]))
    run_dir.mkdir(parents=True, exist_ok=True)
    _write(run_dir / "launch.sh", req["script"], 0o700)
    _write(run_dir / "env.json", req["env_json"], 0o600)
    log_path = run_dir / "server.log"
    env = {**os.environ, **req["env"]}
    with open(log_path, "ab") as log:
        child = subprocess.Popen(["/bin/sh", str(run_dir / "launch.sh")], cwd=str(run_dir), env=env,
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True, close_fds=True)
    stat = read_stat(child.pid)
    record = {"pid": child.pid, "pgid": stat.pgid if stat else child.pid,
              "start_ticks": stat.start_ticks if stat else 0}
    _write(run_dir / "process.json", json.dumps(record, indent=2), 0o644)
    return {**record, "log_path": str(log_path), "run_dir": str(run_dir)}


def _alive(proc: dict) -> bool:
    stat = read_stat(proc["pid"])
    return bool(stat and stat.start_ticks == proc["start_ticks"] and stat.state not in ("Z", "X"))


def _members(proc: dict) -> tuple[list[int], list[int]]:
    ours, foreign = [], []
    for member in live_group_members(proc["pgid"]):
        owned = environ_has(read_environ(member.pid), TOKEN_VAR, proc["token"])
        (ours if owned else foreign).append(member.pid)
    return ours, foreign


def _read_log(path: str, offset: int) -> dict:
    try:
        with open(os.path.expanduser(path), "rb") as log:
            log.seek(offset)
            data = log.read(LOG_CHUNK)
            more = bool(log.read(1))
    except FileNotFoundError:
        data, more = b"", False
    return {"data": base64.b64encode(data).decode(), "more": more}


def op_status(req: dict) -> dict:
    proc = req["proc"]
    ours, foreign = _members(proc)
    answer = {"alive": _alive(proc), "ours": ours, "foreign": foreign}
    if req.get("log_offset") is not None:
        answer["log"] = _read_log(proc["log_path"], req["log_offset"])
    return answer


def _wait_gone(proc: dict, signalled: list, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while _members(proc)[0] or still_running(signalled, proc["pgid"]):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def op_stop(req: dict) -> dict:
    """SIGTERM the group, grace, SIGKILL, confirm: only processes carrying the token are signalled."""
    proc, started = req["proc"], time.monotonic()
    ours, foreign = _members(proc)
    if not ours:
        return {"was_running": False, "signal": "none", "seconds": 0.0, "left_behind": [], "skipped_foreign": foreign}
    used = "SIGTERM"
    signal_server_group(proc["pgid"], ours, foreign, signal.SIGTERM)
    if not _wait_gone(proc, ours, req["grace_s"]):
        used = "SIGKILL"
        signalled = _members(proc)[0]
        signal_server_group(proc["pgid"], signalled, foreign, signal.SIGKILL)
        _wait_gone(proc, signalled, 10.0)
    return {"was_running": True, "signal": used, "seconds": time.monotonic() - started,
            "left_behind": _members(proc)[0], "skipped_foreign": foreign}


def op_read_log(req: dict) -> dict:
    return _read_log(req["path"], req["offset"])


def op_port_free(req: dict) -> dict:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: TIME_WAIT is free
        try:
            sock.bind(("", req["port"]))  # any address: a server on 127.0.0.1 or 0.0.0.0 blocks it
        except OSError:
            return {"free": False}
    return {"free": True}


def op_listens(req: dict) -> dict:
    wanted = listening_inodes(req["port"])
    return {"listens": any(wanted & socket_inodes_of(pid) for pid in _members(req["proc"])[0])}


def op_details(req: dict) -> dict:
    details = {}
    for pid in req["pids"]:
        stat = read_stat(pid)
        if stat and stat.state not in ("Z", "X"):
            details[str(pid)] = {"pid": pid, "pgid": stat.pgid, "start_ticks": stat.start_ticks,
                                 "cmdline": read_cmdline(pid),
                                 "token": environ_value(read_environ(pid), TOKEN_VAR)}
    return {"details": details}


def op_gpu(req: dict) -> dict:
    """Both nvidia-smi queries, raw; the controller parses them (sweeper/hosts/gpu.py)."""
    path = req.get("path") or os.environ.get("PATH", "/usr/bin:/bin")
    exe = shutil.which(req["queries"][0][0], path=path)
    if exe is None:
        return {"found": False}
    env = {**os.environ, "PATH": path}
    outputs = []
    for query in req["queries"]:
        run = subprocess.run([exe, *query[1:]], capture_output=True, text=True, timeout=60, env=env)
        if run.returncode != 0:
            return {"found": True, "error": f"{' '.join(query)} exited {run.returncode}: {run.stderr.strip()[-300:]}"}
        outputs.append(run.stdout)
    return {"found": True, "outputs": outputs}


def op_run(req: dict) -> dict:
    """A short command (an engine's --help or version), argv as given: no shell."""
    try:
        run = subprocess.run(req["argv"], capture_output=True, text=True, timeout=req["timeout_s"],
                             env={**os.environ, **req.get("env", {})}, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"returncode": -1, "stdout": "", "stderr": f"{type(exc).__name__}: {exc}"}
    return {"returncode": run.returncode, "stdout": run.stdout[-200_000:], "stderr": run.stderr[-20_000:]}


OPS = {"run": op_run, "start": op_start, "status": op_status, "stop": op_stop, "read_log": op_read_log,
       "port_free": op_port_free, "listens": op_listens, "details": op_details, "gpu": op_gpu}


def agent_main() -> int:
    req = json.loads(sys.stdin.read())
    sys.stdout.write(json.dumps(OPS[req["op"]](req)))
    return 0


def build_agent_source() -> str:
    """procfs.py and this file as one program (the host has no sweeper installed)."""
    here = Path(__file__).resolve().parent
    keep = []
    for path in (here / "procfs.py", here / "agent.py"):
        lines = path.read_text().split("\n")
        skipping = False
        for line in lines:
            if line.startswith("from sweeper.") or skipping:
                skipping = not line.rstrip().endswith(")") if "(" in line or skipping else False
                continue
            if not line.startswith("from __future__"):
                keep.append(line)
    return "from __future__ import annotations\n" + "\n".join(keep) + "\nsys.exit(agent_main())\n"
