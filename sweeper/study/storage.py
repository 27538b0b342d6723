"""The study's Optuna storage, safe with readers beside a running sweep (docs/storage.md).

- A local SQLite file is in WAL mode: readers (`show --watch`, `report`, a dashboard) never block
  the sweep's writes, nor its writes their reads. On a network file system it keeps SQLite's
  rollback journal: WAL needs shared memory that hosts of a network file system do not share.
- A storage call is short attempts: each waits at most ATTEMPT_S for a lock (SQLite's busy
  timeout, PostgreSQL's lock_timeout); a locked attempt is rolled back by Optuna and tried again
  until LOCK_WAIT_S have passed (STOPPING_WAIT_S once the sweep is being stopped), then StorageBusy.
  A signal is held during an attempt (sweeper/interrupts.py), so a Ctrl-C waits for one attempt
  at most and never leaves a transaction open.
- Optuna's heartbeat thread survives a locked beat (the next one tries again) and, a beat being
  one attempt, is joined within ATTEMPT_S when the trial ends.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import threading
import time
import warnings
from contextlib import closing, nullcontext
from pathlib import Path
from typing import Any, Callable

import optuna
from optuna.exceptions import StorageInternalError
from optuna.storages import RDBStorage
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError

from sweeper.errors import UserError, import_optional
from sweeper.study.lock import schema_lock
from sweeper.interrupts import held_interrupts, stopping
from sweeper.redact import redact_url

log = logging.getLogger(__name__)

ATTEMPT_S = 1.0
LOCK_WAIT_S = 60.0
STOPPING_WAIT_S = 2.0
RETRY_PAUSE_S = 0.05

# File systems whose hosts share no memory: SQLite's WAL index would be wrong there (man 5 fstab names).
NETWORK_FILE_SYSTEMS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs", "ceph", "glusterfs",
                                  "lustre", "gpfs", "beegfs", "fuse.sshfs", "fuse.glusterfs", "fuse.cephfs",
                                  "fuse.s3fs", "fuse.gcsfuse", "fuse.rclone"})
# PostgreSQL's codes for a lock not granted in time, a deadlock and a serialisation failure: all rolled back.
RETRIED_SQLSTATES = frozenset({"55P03", "40P01", "40001"})
_CALLS = threading.local()  # depth: a storage call under way in this thread


class StorageBusy(UserError):
    """The storage stayed locked by another connection for longer than a call may wait."""

    exit_code = 1


# ---------------------------------------------------------------- SQLite's journal

def file_system_type(path: Path, mounts: str | None = None) -> str:
    """The type of the file system `path` lies on (the longest mount point above it in
    /proc/self/mounts); '' where that cannot be read."""
    try:
        mounts = Path("/proc/self/mounts").read_text() if mounts is None else mounts
    except OSError:
        return ""
    target, best = str(path.resolve()), ("", "")
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        if (target == point or target.startswith(point.rstrip("/") + "/")) and len(point) > len(best[0]):
            best = (point, fields[2])
    return best[1]


def journal_mode_for(path: Path) -> str:
    """'wal' for a file on a local disk, 'delete' (the rollback journal) on a network file system."""
    return "delete" if file_system_type(path.parent) in NETWORK_FILE_SYSTEMS else "wal"


def set_journal_mode(path: Path) -> str:
    """Put the SQLite file (created if new) in its journal mode; the mode it is in. The mode is
    kept in the file, so every later connection, ours or a reader's, uses it. A file another
    process has open in the other mode keeps it (the switch needs the file to itself)."""
    wanted = journal_mode_for(path)
    with closing(sqlite3.connect(path, timeout=LOCK_WAIT_S)) as conn:
        try:
            return conn.execute(f"PRAGMA journal_mode={wanted}").fetchone()[0]
        except sqlite3.OperationalError as exc:
            log.warning("%s stays in its journal mode (%s): %s", path, wanted, exc)
            return conn.execute("PRAGMA journal_mode").fetchone()[0]


def sqlite_path(url: str) -> Path | None:
    """The file of a sqlite:/// URL; None for any other storage (or an in-memory SQLite)."""
    if not url.startswith("sqlite:///") or url in ("sqlite:///", "sqlite:///:memory:"):
        return None
    return Path(url.removeprefix("sqlite:///").split("?")[0])


# ---------------------------------------------------------------- short, retried, uninterrupted calls

def is_lock_timeout(exc: BaseException | None) -> bool:
    """Whether a storage error means "another connection held a lock too long" (the attempt was
    rolled back), rather than bad data or a lost server."""
    orig = getattr(exc, "orig", None)
    if isinstance(orig, sqlite3.OperationalError):
        return "locked" in str(orig) or "busy" in str(orig)
    return getattr(orig, "sqlstate", None) in RETRIED_SQLSTATES


def is_schema_written_beside(exc: BaseException) -> bool:
    """Whether opening a new SQLite file failed because another process (a reader opening the study
    with Optuna, `show --watch`) wrote Optuna's tables at the same moment: its alembic row or table
    came first. The next attempt finds the schema whole. 15 of 30 creations failed so beside a
    process loading the study in a loop (2026-12-06); a campaign's validation study died of it."""
    return isinstance(exc, IntegrityError) and "alembic_version" in str(exc) or (
        isinstance(exc, OperationalError) and "already exists" in str(exc))


def lock_wait_s(normal_s: float) -> float:
    """How long a storage call may wait for locks: a stopping sweep records what it can at once."""
    return STOPPING_WAIT_S if stopping() else normal_s


def retried_while_locked(method: Callable) -> Callable:
    """The storage method as attempts with signals held. Optuna converts an error inside its
    session to StorageInternalError after rolling back, so a locked attempt changed nothing. A call
    made from within another (get_best_trial's get_trial) is part of the outer call's attempt."""

    @functools.wraps(method)
    def call(self: StudyStorage, *args: Any, **kwargs: Any) -> Any:
        if getattr(_CALLS, "depth", 0):
            return method(self, *args, **kwargs)
        wait_s = lock_wait_s(self.lock_wait_s)
        deadline = time.monotonic() + wait_s
        while True:
            _CALLS.depth = 1
            try:
                with held_interrupts():
                    return method(self, *args, **kwargs)
            except StorageInternalError as exc:
                if not is_lock_timeout(exc.__cause__):
                    raise
                if time.monotonic() > deadline:
                    raise StorageBusy(f"the study storage {redact_url(self.url)} stayed locked by another "
                                      f"connection for {wait_s:.0f} s ({method.__name__}): "
                                      f"{exc.__cause__.orig}") from None
            finally:
                _CALLS.depth = 0
            time.sleep(RETRY_PAUSE_S)  # between attempts: where a held Ctrl-C is raised

    return call


class StudyStorage(RDBStorage):
    """Optuna's RDBStorage, every call retried while locked and never cut short by a signal."""

    lock_wait_s = LOCK_WAIT_S

    def __init__(self, url: str, **kwargs: Any):
        """Optuna's checks of the schema (reads; a write only on a new file), retried while locked
        or while another process writes the same new schema."""
        deadline = time.monotonic() + lock_wait_s(self.lock_wait_s)
        while True:
            try:
                with held_interrupts():
                    super().__init__(url, **kwargs)
                return
            except SQLAlchemyError as exc:
                if not (is_lock_timeout(exc) or is_schema_written_beside(exc)) or time.monotonic() > deadline:
                    raise
            time.sleep(RETRY_PAUSE_S)

    def record_heartbeat(self, trial_id: int) -> None:
        """One attempt; a beat lost to a lock is logged and the next beat tries again (the grace
        period is many beats), so the heartbeat thread never dies of a lock."""
        try:
            with held_interrupts():
                super().record_heartbeat(trial_id)
        except (StorageInternalError, SQLAlchemyError) as exc:
            log.warning("heartbeat of trial %s not recorded, the next one tries again: %s", trial_id,
                        exc.__cause__ or exc)


# Every call of Optuna's storage API that opens a session, including the private ones Optuna's
# own _CachedStorage calls (record_heartbeat above is the heartbeat thread's own).
_UNTOUCHED = {"record_heartbeat", "remove_session", "upgrade", "get_current_version", "get_head_version",
              "get_all_versions", "get_heartbeat_interval", "get_heartbeat_stale_trial_callback"}
_PRIVATE_CALLS = {"_create_new_trial", "_get_best_trial_id", "_get_stale_trial_ids", "_get_trials", "_set_trial_param"}
for _name, _method in vars(RDBStorage).items():
    if callable(_method) and _name not in _UNTOUCHED and (not _name.startswith("_") or _name in _PRIVATE_CALLS):
        setattr(StudyStorage, _name, retried_while_locked(_method))


# ---------------------------------------------------------------- opening

def storage_engine_kwargs(url: str) -> dict[str, Any]:
    """SQLAlchemy engine options: each attempt's lock wait, and a dropped connection replaced."""
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": ATTEMPT_S}}  # pysqlite's busy timeout, in seconds
    if url.startswith("postgresql"):
        return {"pool_pre_ping": True, "connect_args": {"options": f"-c lock_timeout={int(ATTEMPT_S * 1000)}"}}
    return {}


def open_storage(url: str, heartbeat_s: float = 30, grace_s: float = 600,
                 stale_callback: Callable | None = None) -> StudyStorage:
    """The study's storage with heartbeats; `stale_callback` runs for each trial whose worker
    stopped beating (sweeper/fleet/workers.py retries it)."""
    if url.startswith("postgresql+psycopg:"):  # the driver of the `postgres` extra
        import_optional("psycopg", "postgres", f"the storage {redact_url(url)}")
    try:
        if (path := sqlite_path(url)) is not None:
            set_journal_mode(path)
        with warnings.catch_warnings(), schema_lock(url) if url.startswith("postgresql") else nullcontext():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return StudyStorage(url, engine_kwargs=storage_engine_kwargs(url), heartbeat_interval=heartbeat_s,
                                grace_period=grace_s, heartbeat_stale_trial_callback=stale_callback)
    except StorageBusy:
        raise
    except Exception as exc:  # sqlalchemy raises many kinds; all mean "cannot open this storage"
        raise UserError(f"cannot open storage {redact_url(url)}: {exc}") from None
