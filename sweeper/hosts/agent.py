"""The host half of every transport, stdlib only: what is ours, what is alive, how a server's group
stops, whether a port is free, what a process is. One algorithm, whatever the transport:

- LocalHost calls OPS in its own process.
- SSHHost ships this file with procfs.py (build_agent_source) and runs it on the host for each
  operation (`python -S -c <source>`, a JSON request on stdin, a JSON answer on stdout). It must
  stay python >= 3.9 and stdlib only: the host has no sweeper installed.

An operation takes a JSON-shaped request and returns a JSON-shaped answer. Nothing in a request ever
reaches a shell: values arrive as JSON, and the launch script the controller generated has every
value quoted with shlex.
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
    environ_has, environ_value, listening_inodes, live_group_members, process_alive, read_cmdline,
    read_environ, read_stat, signal_server_group, socket_inodes_of, still_running,
)

TOKEN_VAR = "SWEEPER_RUN_TOKEN"  # put in every server's environment: how we know a process is ours
LOG_CHUNK = 1 << 20  # what one answer carries of a file


# ---------------------------------------------------------------- primitives both transports use

def spawn_in_session(argv: list, cwd: str, env: dict, log_path: str) -> subprocess.Popen:
    """Start a server in its own session (setsid), so it is stopped as a group, never by name.
    The log starts empty: a folder launched in before (a profile, a trial number a deleted study
    used) would otherwise hand its old failure lines to this server's readiness watch."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(list(argv), cwd=cwd, env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def process_record(pid: int) -> dict:
    """pid, pgid and start time: enough to find a server again (ServerProcess)."""
    stat = read_stat(pid)
    return {"pid": pid, "pgid": stat.pgid if stat else pid, "start_ticks": stat.start_ticks if stat else 0}


def run_command(argv: list, env: dict, timeout_s: float, stdin: str | None = None) -> dict:
    """A short command, argv as given (no shell), `env` over this process's environment."""
    feed = {"stdin": subprocess.DEVNULL} if stdin is None else {"input": stdin}
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, errors="replace",
                              timeout=timeout_s, env={**os.environ, **env}, **feed)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"returncode": -1, "stdout": "", "stderr": f"{type(exc).__name__}: {exc}"}
    return {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def read_chunk(path: str, offset: int, limit: int = -1) -> tuple[bytes, bool]:
    """Up to `limit` bytes (-1: all) of a file from `offset`, and whether more follow; a missing
    file reads as empty."""
    try:
        with open(os.path.expanduser(path), "rb") as source:
            source.seek(offset)
            data = source.read(limit)
            return data, limit >= 0 and bool(source.read(1))
    except FileNotFoundError:
        return b"", False


def port_is_free(port: int) -> bool:
    """Whether a server can listen on `port`, on 127.0.0.1 or on 0.0.0.0: nothing listens on it at
    any address (IPv4 or IPv6), and it binds on every IPv4 address as servers bind, with
    SO_REUSEADDR, so a port whose old connections sit in TIME_WAIT is free. Without SO_REUSEADDR
    every stop waited out TIME_WAIT, ~60 s a trial (seen on the H200)."""
    if listening_inodes(port):
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))  # fails for a socket on any IPv4 address that holds it
        except OSError:
            return False
    return True


# ---------------------------------------------------------------- a server's process group

def group_members(proc: dict) -> tuple[list[int], list[int]]:
    """Live members of the server's group: (ours, carrying its token; foreign, not carrying it)."""
    ours, foreign = [], []
    for member in live_group_members(proc["pgid"]):
        owned = environ_has(read_environ(member.pid), TOKEN_VAR, proc["token"])
        (ours if owned else foreign).append(member.pid)
    return ours, foreign


def wait_gone(proc: dict, signalled: list[int], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while group_members(proc)[0] or still_running(signalled, proc["pgid"]):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def stop_group(proc: dict, grace_s: float) -> dict:
    """SIGTERM the group, grace, SIGKILL, confirm: only processes carrying the token are signalled."""
    started = time.monotonic()
    ours, foreign = group_members(proc)
    if not ours:
        return {"was_running": False, "signal": "none", "seconds": 0.0, "left_behind": [], "skipped_foreign": foreign}
    used = "SIGTERM"
    signal_server_group(proc["pgid"], ours, foreign, signal.SIGTERM)
    if not wait_gone(proc, ours, grace_s):
        used = "SIGKILL"
        signalled = group_members(proc)[0]
        signal_server_group(proc["pgid"], signalled, foreign, signal.SIGKILL)
        wait_gone(proc, signalled, 10.0)
    return {"was_running": True, "signal": used, "seconds": time.monotonic() - started,
            "left_behind": group_members(proc)[0], "skipped_foreign": foreign}


def find_servers(intents: list) -> list:
    """The live groups holding a process that carries one of the intents' tokens: every process
    on the host is looked at (the token is in its environment from its first instruction on, so a
    server whose launch was never recorded is found too). The group's main process is the one
    the launch's process.json names when it is there (the session leader otherwise)."""
    by_token = {intent["token"]: intent for intent in intents}
    found: dict = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        token = environ_value(read_environ(int(entry)), TOKEN_VAR)
        stat = read_stat(int(entry)) if token in by_token else None
        if stat and stat.running and stat.pgid not in found:
            found[stat.pgid] = _group_record(stat, by_token[token])
    return list(found.values())


def _group_record(member, intent: dict) -> dict:
    run_dir = os.path.expanduser(intent["run_dir"])
    main = read_stat(member.pgid)
    try:
        with open(os.path.join(run_dir, "process.json")) as source:
            written = json.load(source)
        if written.get("pgid") == member.pgid:
            main = read_stat(int(written["pid"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass  # killed before process.json was written: the session leader is the main process
    if not (main and main.running and main.pgid == member.pgid):
        main = member
    return {"pid": main.pid, "pgid": member.pgid, "start_ticks": main.start_ticks, "token": intent["token"],
            "log_path": os.path.join(run_dir, "server.log")}


def process_details(pids: list) -> dict:
    """Group, start time, command line and run token of the live ones of `pids`, by str(pid)."""
    details = {}
    for pid in pids:
        stat = read_stat(pid)
        if stat and stat.running:
            details[str(pid)] = {"pid": pid, "pgid": stat.pgid, "start_ticks": stat.start_ticks,
                                 "cmdline": read_cmdline(pid),
                                 "token": environ_value(read_environ(pid), TOKEN_VAR)}
    return details


# ---------------------------------------------------------------- operations (JSON in, JSON out)

def write_whole(path: Path, text: str, mode: int = 0o644) -> None:
    """The file whole or not at all (a temporary file renamed over it): a controller killed
    mid-write must not leave a truncated process.json for the next one to read."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(temporary, mode)
    os.replace(temporary, path)


def op_start(req: dict) -> dict:
    """Write the trial folder, start launch.sh in a new session, record PID/PGID/start time."""
    run_dir = Path(os.path.expanduser(req["run_dir"]))
    run_dir.mkdir(parents=True, exist_ok=True)
    write_whole(run_dir / "launch.sh", req["script"], 0o700)
    write_whole(run_dir / "env.json", req["env_json"], 0o600)
    log_path = run_dir / "server.log"
    child = spawn_in_session(["/bin/sh", str(run_dir / "launch.sh")], str(run_dir), req["env"], str(log_path))
    record = process_record(child.pid)
    write_whole(run_dir / "process.json", json.dumps(record, indent=2), 0o644)
    return {**record, "log_path": str(log_path), "run_dir": str(run_dir)}


def _log_answer(path: str, offset: int) -> dict:
    data, more = read_chunk(path, offset, LOG_CHUNK)
    return {"data": base64.b64encode(data).decode(), "more": more}


def op_status(req: dict) -> dict:
    """Whether the server's main process runs, with the next chunk of its log when asked."""
    proc = req["proc"]
    answer: dict = {"alive": process_alive(proc["pid"], proc["start_ticks"])}
    if req.get("log_offset") is not None:
        answer["log"] = _log_answer(proc["log_path"], req["log_offset"])
    return answer


def op_members(req: dict) -> dict:
    ours, foreign = group_members(req["proc"])
    return {"ours": ours, "foreign": foreign}


def op_listens(req: dict) -> dict:
    wanted = listening_inodes(req["port"])
    return {"listens": any(wanted & socket_inodes_of(pid) for pid in group_members(req["proc"])[0])}


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
        if run.returncode != 0:  # nvidia-smi prints why (no driver, ...) to stdout
            why = (run.stderr.strip() or run.stdout.strip())[-300:]
            return {"found": True, "error": f"{' '.join(query)} exited {run.returncode}: {why}"}
        outputs.append(run.stdout)
    return {"found": True, "outputs": outputs}


def op_run(req: dict) -> dict:
    """A short command (an engine's --help or version); the tails that fit in an answer."""
    done = run_command(req["argv"], req.get("env", {}), req["timeout_s"])
    return {**done, "stdout": done["stdout"][-200_000:], "stderr": done["stderr"][-20_000:]}


OPS = {
    "run": op_run, "start": op_start, "status": op_status, "members": op_members,
    "stop": lambda req: stop_group(req["proc"], req["grace_s"]),
    "read_log": lambda req: _log_answer(req["path"], req["offset"]),
    "port_free": lambda req: {"free": port_is_free(req["port"])},
    "listens": op_listens,
    "details": lambda req: {"details": process_details(req["pids"])},
    "find": lambda req: {"found": find_servers(req["intents"])},
    "gpu": op_gpu,
}


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
