"""Fixtures shared by the control plane's unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tcl.control.store import Store
from tcl.control.sweep.queue import SweepQueue


@pytest.fixture
def sqlite_queue(tmp_path: Path) -> Iterator[SweepQueue]:
    """A sweep queue on SQLite (WAL, a file in tmp_path)."""
    store = Store(f"sqlite:///{tmp_path / 'tcl.db'}")
    q = SweepQueue(store)
    yield q
    q.close()
    store.close()
