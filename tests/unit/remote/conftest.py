"""A real worker subprocess (SubprocessSession) behind the @remote decorator, and `notebook()`:
code executed as a notebook cell would be (module `__main__`, source only in linecache)."""

from __future__ import annotations

import itertools
import linecache
import socket
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from tcl.remote import decorator
from tcl.remote.local import SubprocessSession

# The worker hashes strings differently from this process: digests must still agree that an
# untouched set did not change (they are only ever compared within one process).
WORKER_HASHSEED = "12345"

_cells = itertools.count()


def notebook(src: str, ns: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run `src` like a notebook cell in `ns` (a fresh `__main__` namespace by default)."""
    ns = {"__name__": "__main__"} if ns is None else ns
    src = textwrap.dedent(src)
    path = f"<cell-{next(_cells)}>"
    lines = src.splitlines(keepends=True)
    linecache.cache[path] = (len(src), None, lines, path)  # as IPython registers its cells
    exec(compile(src, path, "exec"), ns)
    return ns


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
