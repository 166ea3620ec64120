"""Run leases on SQLite (a file in tmp_path): one owner at a time, expiry, renewal, hand-over;
two threads racing for one free run never both win."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tcl.control.runleases import RunLeases
from tcl.control.runrequest import RunRequest
from tcl.control.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'tcl.db'}")
    for i in range(3):
        s.create_run(f"r{i}", f"r{i}", RunRequest(argv=["true"]))
    yield s
    s.close()


def test_one_owner_until_its_lease_expires(store: Store) -> None:
    leases = RunLeases(store)
    assert leases.take("a", "r0", 30)
    assert leases.take("a", "r0", 30)  # its own: renewed
    assert not leases.take("b", "r0", 30)
    assert leases.of(["r0"])["r0"].owner == "a"
    assert leases.take("a", "r1", 0.05)
    time.sleep(0.1)  # r1's lease lapses (a dead controller stops renewing)
    assert leases.take("b", "r1", 30)
    assert leases.renew("a", {"r0", "r1"}, 30) == {"r0"}  # r1 went to b
    assert leases.renew("b", {"r1"}, 30) == {"r1"}


def test_a_dropped_lease_is_free_at_once_and_only_its_owner_drops_it(store: Store) -> None:
    leases = RunLeases(store)
    assert leases.take("a", "r0", 30)
    leases.drop("b", "r0")  # not b's: nothing happens
    assert not leases.take("b", "r0", 30)
    leases.drop("a", "r0")
    assert leases.of(["r0"]) == {}
    assert leases.take("b", "r0", 30)
    assert leases.renew("a", {"r0"}, 30) == set()


def test_an_expired_lease_is_not_renewed(store: Store) -> None:
    leases = RunLeases(store)
    assert leases.take("a", "r0", 0.05)
    time.sleep(0.1)
    assert leases.renew("a", {"r0"}, 30) == set()  # lapsed: another may have it already
    assert not leases.of(["r0"])["r0"].live()


def test_racing_takers_of_one_run_have_one_winner(store: Store) -> None:
    for run in ("r0", "r1", "r2"):
        wins: list[str] = []
        start = threading.Barrier(4)

        def take(
            owner: str, run: str = run, wins: list[str] = wins, start: threading.Barrier = start
        ) -> None:
            leases = RunLeases(store)
            start.wait()
            if leases.take(owner, run, 30):
                wins.append(owner)

        threads = [threading.Thread(target=take, args=(f"o{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1, (run, wins)
        assert RunLeases(store).of([run])[run].owner == wins[0]
