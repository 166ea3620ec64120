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


def cli_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user of the CLI in this process: HOME and the state dir under ``tmp_path``, no config
    file and no team database of the machine's, no colour; no `tcl serve` daemon (one would
    outlive the test: its own path is tests/integration/control/test_serve.py)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TCL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("TCL_CONFIG", raising=False)
    monkeypatch.delenv("TCL_DB_URL", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")  # tables unwrapped
    monkeypatch.setenv("TCL_SERVE", "0")
    return tmp_path
