"""The Host protocol: everything the trial pipeline asks of a machine, whatever the transport;
and AgentHost, the part of it both transports share (each method one operation of agent.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Protocol, Self, Sequence

from sweeper.errors import UserError
from sweeper.hosts.gpu import APPS_QUERY, GPU_QUERY, POWER_QUERY, GpuParseError, GpuSnapshot, parse_power, parse_snapshot
from sweeper.spec.hosts import HostSpec


class StudyRecord:
    """A frozen dataclass kept in a trial's attrs as a plain dict, read back by its field names."""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> Self:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class ServerProcess(StudyRecord):
    """A server we started: enough to find it again, from this controller or a later one."""

    host: str
    pid: int
    pgid: int
    start_ticks: int  # /proc/<pid>/stat start time: a reused PID will not match
    token: str
    log_path: str


@dataclass(frozen=True)
class LaunchIntent(StudyRecord):
    """What a launch will start, written into the study BEFORE the host spawns anything: the run
    token the server will carry and the folder on the host where its process.json lands. A later
    controller finds the server by them whatever the moment its predecessor died (find_servers)."""

    host: str
    token: str
    run_dir: str  # on the host


@dataclass(frozen=True)
class CommandResult:
    """A short command run on a host; raising from it shows argv, exit code and output tails."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        tail = (self.stderr or self.stdout).strip()[-500:]
        return f"{' '.join(self.argv)} exited {self.returncode}: {tail}"

    def describe_briefly(self) -> str:
        """One line for a person: the exit code and the output's last line (a Python traceback's
        is its exception); `describe()` keeps the tail for --verbose and logs."""
        lines = (self.stderr or self.stdout).strip().splitlines()
        return f"exited {self.returncode}" + (f": {lines[-1].strip()}" if lines else "")


@dataclass(frozen=True)
class StopReport:
    was_running: bool
    signal: str  # "none" | "SIGTERM" | "SIGKILL"
    seconds: float
    left_behind: tuple[int, ...]  # pids still alive after SIGKILL (should be empty)
    skipped_foreign: tuple[int, ...] = ()  # group members without our token: never signalled


@dataclass(frozen=True)
class ProcessDetails:
    """What the GPU gate needs to know about a process holding GPU memory."""

    pid: int
    pgid: int
    start_ticks: int
    cmdline: str
    token: str | None  # the SWEEPER_RUN_TOKEN in its environment, if any


class Host(Protocol):
    name: str
    spec: HostSpec

    def run(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
            timeout_s: float = 120.0) -> CommandResult:
        """A short command on the host (no shell)."""
        ...

    def run_python(self, source: str, stdin: bytes, timeout_s: float) -> CommandResult:
        """`python -c source` with the host's python (site-packages on), fed stdin."""
        ...

    def launch_intent(self, cwd: str, token: str) -> LaunchIntent:
        """Where a server started with `cwd` and `token` will run (pure: nothing is spawned)."""
        ...

    def start_detached(self, argv: Sequence[str], env: Mapping[str, str], cwd: str,
                       log_path: str, token: str) -> ServerProcess: ...

    def find_servers(self, intents: Sequence[LaunchIntent]) -> list[ServerProcess]:
        """The live server groups of these intents: processes carrying an intent's token in their
        environment, and the group named by the process.json in its run folder if that group still
        holds a process with the token. One per group found."""
        ...

    def is_alive(self, proc: ServerProcess) -> bool:
        """The server's main process is running (not exited, not a zombie)."""
        ...

    def owned_members(self, proc: ServerProcess) -> list[int]:
        """Live processes of the server's group that carry its token."""
        ...

    def stop_group(self, proc: ServerProcess, grace_s: float) -> StopReport: ...

    def read_log(self, proc: ServerProcess, offset: int) -> tuple[str, int]: ...

    def read_bytes(self, path: str, offset: int) -> bytes:
        """The next chunk of a file on the host from `offset` (b"" at its end or if it is missing)."""
        ...

    def port_is_free(self, port: int) -> bool: ...

    def listens_on(self, proc: ServerProcess, port: int) -> bool:
        """The socket listening on `port` belongs to this server's process group."""
        ...

    def base_url(self, port: int) -> str: ...

    def python(self) -> str: ...

    def gpu_snapshot(self) -> GpuSnapshot | None:
        """nvidia-smi's view of GPU memory, or None when the host's GPU gate is off (no nvidia-smi)."""
        ...

    def gpu_power(self) -> dict[int, float] | None:
        """Watts per GPU index (nvidia-smi power.draw), or None when the gate is off or the reading fails."""
        ...

    def process_details(self, pids: Sequence[int]) -> dict[int, ProcessDetails]:
        """Group, start time, command line and run token of live processes (dead ones are left out)."""
        ...

    def take_disruption(self) -> str | None:
        """What went wrong with the connection since the last call (a drop, a reconnect), or None."""
        ...

    def close(self) -> None: ...


class AgentHost:
    """The Host methods that are one agent operation each: the same algorithm on every transport.
    A transport supplies `_agent` (how to reach agent.py: in process, or over SSH) and the rest of
    the protocol (running commands, starting servers, reading logs, URLs, the connection)."""

    name: str
    spec: HostSpec

    def _agent(self, op: str, request: Mapping[str, Any], retry: bool = True, timeout_s: float = 60.0) -> dict:
        raise NotImplementedError

    def is_alive(self, proc: ServerProcess) -> bool:
        return self._agent("status", {"proc": proc.to_dict()})["alive"]

    def owned_members(self, proc: ServerProcess) -> list[int]:
        return self._agent("members", {"proc": proc.to_dict()})["ours"]

    def stop_group(self, proc: ServerProcess, grace_s: float) -> StopReport:
        answer = self._agent("stop", {"proc": proc.to_dict(), "grace_s": grace_s}, timeout_s=grace_s + 60)
        return StopReport(answer["was_running"], answer["signal"], answer["seconds"],
                          tuple(answer["left_behind"]), tuple(answer["skipped_foreign"]))

    def find_servers(self, intents: Sequence[LaunchIntent]) -> list[ServerProcess]:
        if not intents:
            return []
        answer = self._agent("find", {"intents": [i.to_dict() for i in intents]})
        return [ServerProcess.from_dict({**found, "host": self.name}) for found in answer["found"]]

    def port_is_free(self, port: int) -> bool:
        return self._agent("port_free", {"port": port})["free"]

    def listens_on(self, proc: ServerProcess, port: int) -> bool:
        return self._agent("listens", {"proc": proc.to_dict(), "port": port})["listens"]

    def gpu_power(self) -> dict[int, float] | None:
        # A missing reading costs the level its energy numbers, never the trial.
        if self.spec.gpu_gate == "off":
            return None
        answer = self._agent("gpu", {"queries": [list(POWER_QUERY)], "path": self.spec.env.get("PATH")})
        if not answer["found"] or "error" in answer:
            return None
        try:
            return parse_power(answer["outputs"][0])
        except GpuParseError:
            return None

    def process_details(self, pids: Sequence[int]) -> dict[int, ProcessDetails]:
        answer = self._agent("details", {"pids": list(pids)})["details"]
        return {int(pid): ProcessDetails(**d) for pid, d in answer.items()}

    def gpu_snapshot(self) -> GpuSnapshot | None:
        if self.spec.gpu_gate == "off":
            return None
        answer = self._agent("gpu", {"queries": [list(GPU_QUERY), list(APPS_QUERY)],
                                     "path": self.spec.env.get("PATH")})
        if not answer["found"]:
            if self.spec.gpu_gate == "on":
                raise UserError(f"host {self.name!r}: gpu_gate is on but nvidia-smi is not on the host's PATH")
            return None
        if "error" in answer:
            raise UserError(f"host {self.name!r}: {answer['error']}")
        try:
            return parse_snapshot(*answer["outputs"])
        except GpuParseError as exc:
            raise UserError(f"host {self.name!r}: {exc}") from None
