"""A real worker subprocess (SubprocessSession) behind the @remote decorator; `notebook()` is
tests/unit/remote/conftest.py's."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tcl.remote import decorator
from tcl.remote.local import SubprocessSession

# The worker hashes strings differently from this process: digests must still agree that an
# untouched set did not change (they are only ever compared within one process).
WORKER_HASHSEED = "12345"


class CountingSession:
    """Counts connections, to show that nothing reached the worker."""

    def __init__(self, inner: SubprocessSession) -> None:
        self.inner = inner
        self.connects = 0

    def connect(self) -> tuple[socket.socket, str]:
        self.connects += 1
        return self.inner.connect()

    def close(self) -> None:
        pass  # the module's worker outlives each test


@pytest.fixture(scope="module")
def worker() -> Iterator[SubprocessSession]:
    session = SubprocessSession(env={"PYTHONHASHSEED": WORKER_HASHSEED})
    yield session
    session.close()


@pytest.fixture
def session(worker: SubprocessSession) -> Iterator[CountingSession]:
    counting = CountingSession(worker)
    previous = decorator.set_session_factory(lambda placement: counting)
    yield counting
    decorator.set_session_factory(previous)
