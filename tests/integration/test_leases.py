"""Host leases and the study lock against a real PostgreSQL (tests/pg.py)."""

from __future__ import annotations

import threading
import time

import pytest

from sweeper.errors import UserError
from sweeper.fleet.leases import LeaseBook, LeaseKeeper


def test_only_one_of_many_racing_holders_wins_a_slot(pg_url):
    books = [LeaseBook(pg_url, grace_s=60) for _ in range(8)]
    barrier = threading.Barrier(len(books))
    wins = []

    def race(index: int) -> None:
        barrier.wait()
        if books[index].try_acquire("gpu-box", f"holder-{index}", {"trial": index}):
            wins.append(index)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(len(books))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    holder, info = books[0].holders()["gpu-box"]
    assert holder == f"holder-{wins[0]}" and info == {"trial": wins[0]}
    for book in books:
        book.close()


def test_a_lease_expires_with_its_holders_heartbeat_and_hands_over_what_it_ran(pg_url):
    book = LeaseBook(pg_url, grace_s=1.5)
    assert book.try_acquire("box", "dead", {"trial": 1}) is not None
    book.update_info("box", "dead", {"trial": 1, "server": {"pid": 42}})
    assert book.try_acquire("box", "alive", {"trial": 2}) is None  # held and fresh
    time.sleep(2.0)  # no renewal: the holder is dead
    grant = book.try_acquire("box", "alive", {"trial": 2})
    assert grant is not None and grant.previous == {"trial": 1, "server": {"pid": 42}}
    assert book.renew(["box"], "dead") == ["box"]  # the old holder learns it lost the lease
    book.release("box", "dead")  # a stale holder cannot release someone else's lease
    assert book.holders()["box"][0] == "alive"
    book.close()


def test_a_renewed_lease_outlives_the_grace_period_and_is_released_at_the_end(pg_url):
    book = LeaseBook(pg_url, grace_s=1.5)
    keeper = LeaseKeeper(book, "worker-1", interval_s=0.3, poll_s=0.1)
    keeper.acquire(["box[0,1]", "box[2,3]"], {"trial": 7})
    time.sleep(2.5)
    assert book.try_acquire("box[2,3]", "worker-2", {}) is None  # renewed: still held
    assert keeper.lost == []
    keeper.release()
    assert book.holders() == {}
    assert book.try_acquire("box[2,3]", "worker-2", {}) is not None
    book.close()


def test_the_study_lock_serialises_two_controllers(pg_url):
    books = [LeaseBook(pg_url, grace_s=60) for _ in range(2)]
    inside, overlaps = [], []

    def critical(book: LeaseBook) -> None:
        for _ in range(5):
            with book.study_lock("s1"):
                if inside:
                    overlaps.append(True)
                inside.append(1)
                time.sleep(0.02)
                inside.pop()

    threads = [threading.Thread(target=critical, args=(b,)) for b in books]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == []
    for book in books:
        book.close()


def test_leases_refuse_a_storage_that_is_not_postgresql(tmp_path):
    with pytest.raises(UserError, match="PostgreSQL"):
        LeaseBook(f"sqlite:///{tmp_path}/x.db", 60)
