"""The schema lock: a PostgreSQL advisory lock around creating Optuna's tables.

It lives with the study (not with fleet's host leases) because opening a study's storage takes it, one
controller or many; fleet's study lock keys its advisory lock the same way (advisory_lock_key).
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from typing import Iterator

import sqlalchemy
from sqlalchemy import text


@contextmanager
def schema_lock(url: str) -> Iterator[None]:
    """Serialise the creation of Optuna's tables: two controllers starting on an empty database
    would both CREATE TYPE and one would fail."""
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": advisory_lock_key("sweeper-schema")})
            conn.commit()
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": advisory_lock_key("sweeper-schema")})
                conn.commit()
    finally:
        engine.dispose()


def advisory_lock_key(name: str) -> int:
    """The signed 64-bit key PostgreSQL's advisory locks take, from a name."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
