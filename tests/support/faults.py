"""Fault injection for the CLI: SIGKILL a command at chosen moments, resume it each time, and
what must hold after (no server left, each trial once, nothing measured twice).

`kill_and_resume(cli, start, resume, moments)` starts `start`, waits for the first moment, kills
the controller's process group with SIGKILL (as a crash of the machine's controller would), then
starts `resume` and waits for the next moment, and so on; after the last moment `resume` runs to
its end. A moment is any object with `wait(session) -> str | None` (what the kill hit, or None when
the command ended first), so a command with other phases plugs in its own moments: `AtLine`
matches any progress line, `WhenStored` any state of a study's storage (held there under a lock).
`sweep_moments` builds a seeded plan over a sweep's trials; a campaign's phases add their own
moments (tests/e2e/test_sigkill_anywhere.py).
"""

from __future__ import annotations

import json
import os
import queue
import random
import re
import signal
import sqlite3
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Protocol, Sequence

from sweeper.hosts.agent import TOKEN_VAR
from sweeper.hosts.procfs import environ_value, read_environ, read_stat
from tests.support.cli import Cli, stop_recorded_group

TRIAL_DONE = re.compile(r"-> trial (\d+):")
TRIAL_STAGE = re.compile(r"trial (\d+): (C=\d+|[a-z_]+)")
TRIAL_STAGES = ("preflight", "launch", "wait_ready", "check_output", "load", "C=1", "C=4", "stop")  # LineEvents' lines


class Session:
    """One run of the command: the process, and its stdout lines as they come."""

    def __init__(self, proc: subprocess.Popen, study_db: Path):
        self.proc, self.study_db = proc, study_db
        self.lines: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        self.started = time.monotonic()
        self.stderr: list[str] = []
        self._readers = [threading.Thread(target=self._read, daemon=True),
                         threading.Thread(target=lambda: self.stderr.extend(proc.stderr), daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def next_line(self, timeout_s: float = 300.0) -> str | None:
        """The next stdout line; None once the command has ended."""
        line = self._queue.get(timeout=timeout_s)
        if line is not None:
            self.lines.append(line)
        return line

    def transcript(self) -> str:
        """Every line it wrote (once it ended: a moment that watched the storage read none)."""
        if self.proc.poll() is not None:
            for reader in self._readers:
                reader.join(10)
            while not self._queue.empty() and self.next_line(0) is not None:
                pass
        return "\n".join(self.lines + self.stderr[-20:])

    def trials_done(self) -> int:
        return sum(1 for line in self.lines if TRIAL_DONE.search(line))

    def kill(self) -> None:
        """SIGKILL the command's whole group and reap it; again, nothing. A moment that holds the
        storage locked kills before it lets go: released first, the controller's waiting write could
        land before the kill (2 runs of the SIGKILL sweep test in 17 recorded the spawn it was to miss)."""
        if self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # the whole group is gone already
            self.proc.wait(30)


class Moment(Protocol):
    def wait(self, session: Session) -> str | None: ...


@dataclass(frozen=True)
class AtLine:
    """After `after` lines matching `count` in this session, the first line matching `pattern`,
    then `delay_s`; the end of a trial (TRIAL_DONE) stands in when the pattern does not come
    (unless `or_trial_end` is off: a line of a later phase is waited for through the trials)."""

    pattern: str
    count: str = TRIAL_DONE.pattern
    after: int = 0
    delay_s: float = 0.0
    or_trial_end: bool = True

    def wait(self, session: Session) -> str | None:
        counted = 0
        while (line := session.next_line()) is not None:
            if counted >= self.after and (re.search(self.pattern, line)
                                          or (self.or_trial_end and TRIAL_DONE.search(line))):
                time.sleep(self.delay_s)
                return f"{line.strip()} +{self.delay_s:.2f}s"
            counted += bool(re.search(self.count, line))
        return None


@dataclass(frozen=True)
class AtStage:
    """After `after` trials finished in this session, the `n`-th stage line of a trial (1:
    preflight, 2: launch, ... in TRIAL_STAGES order), or its stop line if it stops sooner (a
    failed config skips the load), then `delay_s`. A trial that launches nothing (a constraint)
    is let finish."""

    n: int
    after: int = 0
    delay_s: float = 0.0

    def wait(self, session: Session) -> str | None:
        finished, seen = 0, 0
        while (line := session.next_line()) is not None:
            if TRIAL_DONE.search(line):
                finished, seen = finished + 1, 0
            elif (stage := TRIAL_STAGE.search(line)) and finished >= self.after:
                seen += 1
                if seen >= self.n or stage.group(2) == "stop":
                    time.sleep(self.delay_s)
                    return f"{line.strip()} +{self.delay_s:.2f}s"
        return None


@dataclass(frozen=True)
class AfterStart:
    """`delay_s` after the command started: during its start-up and recovery."""

    delay_s: float

    def wait(self, session: Session) -> str | None:
        time.sleep(max(0.0, self.delay_s - (time.monotonic() - session.started)))
        return None if session.proc.poll() is not None else f"{self.delay_s:.2f}s after start"


@dataclass(frozen=True)
class BetweenSpawnAndRecord:
    """Inside the launch stage, after the host spawned the server and before the study recorded
    it: the study is polled, and once a poll reads a launch intent without its record it is locked
    exclusively and read again, so the controller's record waits behind the lock; the server
    carrying the intent's token is awaited, and the controller is killed. `after` trials are let finish first. A launch
    whose intent and record both came between two polls is let go and the next one watched; at
    the `tries`-th such, or the first with `or_recorded` (a launch with no next one: the
    profile's), it is killed there all the same (a kill just after the record beats no kill).

    `db`: the study to watch (default the session's: a campaign's validation study has its own);
    `of="profile"`: the launch of `sweeper profile` (its intent and record are study attrs)."""

    after: int = 0
    tries: int = 3
    db: Path | None = None
    of: str = "trial"
    or_recorded: bool = False

    def wait(self, session: Session) -> str | None:
        path = self.db or session.study_db
        intents, recorded = (_profile_intent, _profile_recorded) if self.of == "profile" else (_intents, _has_attr)
        while session.trials_done() < self.after:
            if session.next_line() is None:
                return None
        seen, missed = _read(path, intents, {}), 0
        # Plain reads between the gates, every 0.5 ms (a WAL reader never delays the controller's
        # writes): a local spawn's window is a few ms, which 2-ms polls under an exclusive lock each
        # missed three times running. The lock is taken only to hold an unrecorded launch so.
        for db in _polls(path, session.proc, interval_s=0.0005):
            if db is None:
                continue
            try:
                fresh = {key: token for key, token in intents(db).items() if seen.get(key) != token}
                if any(not recorded(db, key) for key in fresh):
                    db.execute("BEGIN EXCLUSIVE")  # a gate: the controller's record waits behind it
                    try:
                        for key, token in fresh.items():
                            if not recorded(db, key):
                                if not _wait_token_process(token, session.proc):
                                    return None
                                session.kill()
                                return f"{self.of} {key}: spawned (token {token[:8]}), not recorded"
                    finally:
                        db.execute("ROLLBACK")
                for key, token in fresh.items():  # intent and record both came between two polls
                    seen[key] = token
                    missed += 1
                    if self.or_recorded or missed >= self.tries:
                        return f"{self.of} {key}: spawned (token {token[:8]}), recorded before the lock"
            except sqlite3.OperationalError:
                pass  # the schema is not written yet
        return None


def _polls(path: Path, proc: subprocess.Popen, interval_s: float = 0.002) -> Iterator[sqlite3.Connection | None]:
    """One connection to `path` (None until the file exists), every `interval_s` while `proc` runs:
    the polls must be quick, and opening a connection per poll loses a fast launch's window."""
    db = None
    try:
        while proc.poll() is None:
            if db is None and path.exists():
                db = sqlite3.connect(path, timeout=30, isolation_level=None)
            yield db
            time.sleep(interval_s)
    finally:
        if db is not None:
            db.close()


@dataclass(frozen=True)
class WhenStored:
    """The first moment this session's work brings a study's storage (`db`) into a state
    (`state(connection)` true, having been false in this session: a state left by the last kill
    does not count): the storage is locked, the state checked again under the lock, and the
    controller killed before its next write. `what` names the state in the hit. A state that
    lasts a few milliseconds can pass between two polls: where `moved(connection)` (a value the
    state's passing changes) changed meanwhile, the kill comes just after, and the hit says so."""

    db: Path
    state: Callable[[sqlite3.Connection], bool]
    what: str
    moved: Callable[[sqlite3.Connection], object] | None = None

    def wait(self, session: Session) -> str | None:
        was_false, start = False, None
        for db in _polls(self.db, session.proc):
            try:
                now = self.state(db) if db else False
                if now and was_false:
                    db.execute("BEGIN EXCLUSIVE")  # the controller's next write waits
                    try:
                        if self.state(db):
                            session.kill()
                            return self.what
                    finally:
                        db.execute("ROLLBACK")
                was_false = was_false or not now
                if self.moved and db:
                    value = self.moved(db)
                    if start is None:
                        start = (value,)
                    elif value != start[0] and was_false:
                        return f"{self.what}: just after (between two polls)"
            except sqlite3.OperationalError:
                pass  # the schema is not written yet
        return None


@dataclass
class Kill:
    moment: str
    hit: str
    where: str = ""  # what `kill_and_resume`'s `where` said right after the kill (a campaign's phase)


@dataclass
class FaultRun:
    kills: list[Kill] = field(default_factory=list)
    final: subprocess.CompletedProcess | None = None
    outputs: list[str] = field(default_factory=list)  # each session's stdout


def kill_and_resume(cli: Cli, start: Sequence[str], resume: Sequence[str], moments: Sequence[Moment],
                    study_db: Path, final_timeout_s: float = 300,
                    where: Callable[[], str] = lambda: "") -> FaultRun:
    """Run `start`, SIGKILL it at the first moment, run `resume` and kill it at the next, ...; then
    `resume` to its end. Stops early (fewer kills) if a command ends before its moment. `where()`
    is asked after each kill what it interrupted (kept in the Kill)."""
    run = FaultRun()
    argv = start
    for moment in moments:
        session = Session(cli.start(*argv), study_db)
        try:
            hit = moment.wait(session)
            if hit is None:
                session.proc.wait(60)
                run.outputs.append(session.transcript())
                break
            session.kill()
            run.kills.append(Kill(type(moment).__name__, hit, where()))
            run.outputs.append(session.transcript())
        finally:
            session.kill()
        argv = resume
    run.final = cli.run(*resume, timeout=final_timeout_s)
    return run


@dataclass
class SweepPlan:
    """Kills spread over a sweep of `budget` evaluations, decided as the run goes (the sweep's
    order after a resume is not known in advance): a session lets one more evaluation finish
    before its kill about as often as needed to reach the last evaluation at the last kill, then
    kills at a random stage of a trial plus a random delay. Near the end only stages that cannot
    run past the record of the trial are chosen, so every kill still finds work to interrupt."""

    rng: random.Random
    kills: int  # the plan's own (the other moments are not its)
    budget: int
    done: int = 0  # moments used

    def next_moment(self, session: Session) -> Moment:
        remaining = self.budget - evaluations(session.study_db)
        left = self.kills - self.done
        self.done += 1
        finish = remaining >= 2 and self.rng.random() < (remaining - 1) / max(left, 1)
        roomy = remaining - finish >= 2  # an overrun into the trial's record still leaves work
        return AtStage(self.rng.randint(1, len(TRIAL_STAGES) if roomy else 4), after=int(finish),
                       delay_s=self.rng.uniform(0.0, 0.4 if roomy else 0.05))


@dataclass(frozen=True)
class Planned:
    """The next moment of a SweepPlan, chosen when its session starts."""

    plan: SweepPlan

    def wait(self, session: Session) -> str | None:
        return self.plan.next_moment(session).wait(session)


def sweep_moments(rng: random.Random, kills: int, budget: int, spawn_kills: int = 1,
                  start_kills: int = 2) -> list[Moment]:
    """`kills` seeded moments over a sweep: `spawn_kills` between a spawn and its record (in the
    first half, so a launch is left to catch), `start_kills` during start-up and recovery (never
    the first: the study must exist), the others from a SweepPlan."""
    plan = SweepPlan(rng, kills, budget)
    spawn = set(rng.sample(range(1, max(kills // 2, 2)), spawn_kills))
    at_start = set(rng.sample([k for k in range(1, kills) if k not in spawn], start_kills))
    moments: list[Moment] = []
    for k in range(kills):
        if k in spawn:
            moments.append(BetweenSpawnAndRecord(tries=8))  # some local launches leave no window: seen missing 3 running
        elif k in at_start:
            moments.append(AfterStart(rng.uniform(0.3, 3.0)))
        else:
            moments.append(Planned(plan))
    plan.kills = sum(isinstance(m, Planned) for m in moments)
    return moments


# ---------------------------------------------------------------- what must hold after

def servers_left(root: Path) -> list[tuple[int, str]]:
    """(pid, token) of live processes carrying a run token whose working folder is under `root`
    (every server a test's sweep starts, local or over the test sshd, runs in one)."""
    left = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        token = environ_value(read_environ(pid), TOKEN_VAR)
        stat = read_stat(pid)
        if token and stat and stat.running:
            try:
                cwd = os.readlink(entry / "cwd")
            except OSError:
                continue
            if Path(cwd).is_relative_to(root):
                left.append((pid, token))
    return left


def stop_servers_under(root: Path) -> None:
    """Stop what a test's runs under `root` left running (a test that failed or timed out mid-sweep):
    every recorded group still carrying its token, and servers spawned and never recorded."""
    for record in root.rglob("process.json"):
        stop_recorded_group(json.loads(record.read_text()))
    for pid, token in servers_left(root):
        try:
            stop_recorded_group({"pgid": os.getpgid(pid), "token": token})
        except ProcessLookupError:
            pass


def token_processes(tokens: set[str]) -> list[int]:
    """Live processes anywhere on this machine carrying one of `tokens`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and environ_value(read_environ(int(entry.name)), TOKEN_VAR) in tokens:
            stat = read_stat(int(entry.name))
            if stat and stat.running:
                found.append(int(entry.name))
    return found


# ---------------------------------------------------------------- reading the study's storage

def _rows(path: Path, sql: str, args: tuple = ()) -> list[tuple]:
    return _read(path, lambda db: db.execute(sql, args).fetchall(), [])


def _read(path: Path, query: Callable[[sqlite3.Connection], object], missing: object = False):
    """`query` on the storage; `missing` while the file or its schema is not written yet."""
    if not path.exists():
        return missing
    db = sqlite3.connect(path, timeout=30)
    try:
        return query(db)
    except sqlite3.OperationalError:
        return missing  # the schema is not written yet
    finally:
        db.close()


def study_attr(path: Path, key: str):
    """A study user attr as stored (None when absent): read without optuna, any moment."""
    rows = _rows(path, "SELECT value_json FROM study_user_attributes WHERE key = ?", (key,))
    return json.loads(rows[0][0]) if rows else None


def _intents(db: sqlite3.Connection) -> dict[int, str]:
    rows = db.execute("SELECT t.number, a.value_json FROM trials t JOIN trial_user_attributes a "
                       "ON a.trial_id = t.trial_id WHERE a.key = 'launch_intent'").fetchall()
    return {number: json.loads(value)["token"] for number, value in rows}


def evaluations(path: Path) -> int:
    """Finished trials that launched a server (what a study's budget counts; duplicates are free)."""
    return len(_rows(path, "SELECT t.number FROM trials t JOIN trial_user_attributes a ON a.trial_id = t.trial_id "
                           "WHERE t.state IN ('COMPLETE', 'PRUNED') AND a.key = 'launched' AND a.value_json = 'true' "
                           "AND NOT EXISTS (SELECT 1 FROM trial_user_attributes d WHERE d.trial_id = t.trial_id "
                           "AND d.key = 'duplicate_of')"))


def _profile_intent(db: sqlite3.Connection) -> dict[str, str]:
    rows = db.execute("SELECT value_json FROM study_user_attributes WHERE key = 'profile_launch_intent'").fetchall()
    intent = json.loads(rows[0][0]) if rows else None
    return {"profile": intent["token"]} if intent else {}


def _profile_recorded(db: sqlite3.Connection, key: str) -> bool:
    rows = db.execute("SELECT value_json FROM study_user_attributes WHERE key = 'profile_server'").fetchall()
    return bool(rows and json.loads(rows[0][0]))


def _has_attr(db: sqlite3.Connection, number: int, key: str = "process") -> bool:
    return bool(db.execute("SELECT 1 FROM trials t JOIN trial_user_attributes a ON a.trial_id = t.trial_id "
                           "WHERE t.number = ? AND a.key = ?", (number, key)).fetchall())


def _wait_token_process(token: str, controller: subprocess.Popen, timeout_s: float = 30) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and controller.poll() is None:
        if token_processes({token}):
            return True
        time.sleep(0.005)
    return False
