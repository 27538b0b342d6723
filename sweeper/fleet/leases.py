"""Host leases and the study lock, kept in the study's own PostgreSQL database.

A lease says "this slot of this host runs one server, for this holder, until renewed_at + grace".
It lives in a small table of our own (sweeper_host_leases) rather than in Optuna's study attrs:
Optuna sets attrs by key with no compare-and-set, so two controllers could both "win" a host; one
INSERT .. ON CONFLICT DO UPDATE .. WHERE (expired or mine) is atomic in PostgreSQL. The table is
per database, not per study, so two studies pointed at one host also exclude each other.

Times are the database's clock (clock_timestamp()), so controllers on machines with skewed clocks
agree on when a lease expired. The study lock is a PostgreSQL advisory lock: held per connection,
so a controller killed while holding it releases it with its connection. The lock around creating
Optuna's tables is the study's own (sweeper/study/lock.py): the study store takes it, fleet or not.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import sqlalchemy
from sqlalchemy import text

from sweeper.errors import UserError
from sweeper.redact import redact_url
from sweeper.study.lock import advisory_lock_key

TABLE = "sweeper_host_leases"
NOW = "extract(epoch from clock_timestamp())"


def new_holder_id() -> str:
    """Who holds a lease: this process on this machine, unique across restarts."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def slot_name(host: str, gpu_set: str | None) -> str:
    return host if gpu_set is None else f"{host}[{gpu_set}]"


@dataclass(frozen=True)
class Grant:
    """A lease won; `previous` is what an expired holder left there (its study, trial, server)."""

    slot: str
    previous: dict | None


class LeaseBook:
    def __init__(self, url: str, grace_s: float):
        if not url.startswith("postgresql"):
            raise UserError(f"host leases need a PostgreSQL storage (postgresql+psycopg://...), got {redact_url(url)}")
        self.grace_s = grace_s
        try:
            self.engine = sqlalchemy.create_engine(url, pool_pre_ping=True)
            with self.engine.begin() as conn:
                conn.execute(text(f"CREATE TABLE IF NOT EXISTS {TABLE} (slot TEXT PRIMARY KEY, holder TEXT NOT NULL, "
                                  "renewed_at DOUBLE PRECISION NOT NULL, info TEXT NOT NULL, previous TEXT)"))
        except sqlalchemy.exc.IntegrityError:
            pass  # another controller created the table at the same moment
        except sqlalchemy.exc.SQLAlchemyError as exc:
            raise UserError(f"cannot open the lease table in {redact_url(url)}: {exc}") from None

    def try_acquire(self, slot: str, holder: str, info: dict) -> Grant | None:
        """The lease on `slot` if it is free, expired or already ours; None while someone else holds it."""
        with self.engine.begin() as conn:
            row = conn.execute(text(
                f"INSERT INTO {TABLE} AS l (slot, holder, renewed_at, info) VALUES (:slot, :holder, {NOW}, :info) "
                "ON CONFLICT (slot) DO UPDATE SET holder = excluded.holder, renewed_at = excluded.renewed_at, "
                "info = excluded.info, previous = CASE WHEN l.holder = excluded.holder THEN l.previous ELSE l.info END "
                "WHERE l.holder = excluded.holder OR l.renewed_at < excluded.renewed_at - :grace "
                "RETURNING previous"), {"slot": slot, "holder": holder, "info": json.dumps(info),
                                        "grace": self.grace_s}).first()
        if row is None:
            return None
        return Grant(slot, json.loads(row[0]) if row[0] else None)

    def update_info(self, slot: str, holder: str, info: dict) -> bool:
        with self.engine.begin() as conn:
            return conn.execute(text(f"UPDATE {TABLE} SET info = :info WHERE slot = :slot AND holder = :holder"),
                                {"slot": slot, "holder": holder, "info": json.dumps(info)}).rowcount == 1

    def renew(self, slots: list[str], holder: str) -> list[str]:
        """Renew our leases; returns the slots that are no longer ours (expired and taken)."""
        with self.engine.begin() as conn:
            kept = {r[0] for r in conn.execute(text(
                f"UPDATE {TABLE} SET renewed_at = {NOW} WHERE holder = :holder AND slot = ANY(:slots) RETURNING slot"),
                {"holder": holder, "slots": list(slots)})}
        return [s for s in slots if s not in kept]

    def release(self, slot: str, holder: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(text(f"DELETE FROM {TABLE} WHERE slot = :slot AND holder = :holder"),
                         {"slot": slot, "holder": holder})

    def holders(self) -> dict[str, tuple[str, dict]]:
        """slot -> (holder, info) of every lease (for `show` and tests)."""
        with self.engine.connect() as conn:
            rows = conn.execute(text(f"SELECT slot, holder, info FROM {TABLE}")).all()
        return {slot: (holder, json.loads(info)) for slot, holder, info in rows}

    @contextmanager
    def study_lock(self, study_name: str) -> Iterator[None]:
        """Serialise claim decisions of one study across every controller (a session advisory lock)."""
        key = advisory_lock_key(f"sweeper-study:{study_name}")
        with self.engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
            conn.commit()
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                conn.commit()

    def close(self) -> None:
        self.engine.dispose()


class LeaseKeeper:
    """Holds leases for one trial: waits for them (in a fixed order, so two multi-slot trials
    cannot deadlock), renews them every `interval_s` from a thread, releases them at the end."""

    def __init__(self, book: LeaseBook, holder: str, interval_s: float, poll_s: float = 1.0):
        self.book, self.holder, self.interval_s, self.poll_s = book, holder, interval_s, poll_s
        self.held: list[str] = []
        self.lost: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self, slots: list[str], info: dict, on_wait=lambda slot, holder: None,
                deadline_s: float | None = None) -> list[Grant]:
        grants = []
        started = time.monotonic()
        try:
            for slot in sorted(slots):
                while (grant := self.book.try_acquire(slot, self.holder, info)) is None:
                    if deadline_s is not None and time.monotonic() - started > deadline_s:
                        raise TimeoutError(f"slot {slot} stayed leased for {deadline_s:.0f}s")
                    on_wait(slot, self.book.holders().get(slot, ("?", {}))[0])
                    time.sleep(self.poll_s)
                self.held.append(slot)
                grants.append(grant)
        except BaseException:
            self.release()
            raise
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew_loop, name="lease-renewal", daemon=True)
        self._thread.start()
        return grants

    def note(self, info: dict) -> None:
        """Record what runs under the leases (the server), for whoever takes them over after us."""
        for slot in self.held:
            self.book.update_info(slot, self.holder, info)

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.lost += [s for s in self.book.renew(self.held, self.holder) if s not in self.lost]
            except sqlalchemy.exc.SQLAlchemyError:
                pass  # the database is unreachable for a moment: the grace period covers it

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        for slot in self.held:
            try:
                self.book.release(slot, self.holder)
            except sqlalchemy.exc.SQLAlchemyError:
                pass  # it expires with the grace period
        self.held = []
