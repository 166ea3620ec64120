"""`@remote`: call a function on a remote session as if it were local."""

from __future__ import annotations

import functools
import socket
import threading
import types
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from tcl.remote.call import CallStats, exchange, last_call_stats
from tcl.remote.capture import prepare

Placement = Mapping[str, Any]


class Session(Protocol):
    """A place to run calls: a worker reachable by TCP. `connect()` returns a new connected
    socket (one per call) and the session token; `close()` ends the session (the job)."""

    def connect(self) -> tuple[socket.socket, str]: ...

    def close(self) -> None: ...


SessionFactory = Callable[[Placement], Session]


def _default_session_factory(placement: Placement) -> Session:
    """A ``remote`` session run placed like ``tcl submit`` (:mod:`tcl.remote.tclsession`)."""
    from tcl.remote.tclsession import TclSession

    return TclSession(placement)


_lock = threading.Lock()
_factory: SessionFactory = _default_session_factory
_sessions: dict[tuple[tuple[str, str], ...], Session] = {}


def _key(placement: Placement) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in placement.items()))


def session_for(placement: Placement) -> Session:
    """The session for `placement`, started on first use and shared by every function with the
    same placement (a session is a remote job: one per call would be far too slow)."""
    key = _key(placement)
    with _lock:
        session = _sessions.get(key)
        if session is None:
            session = _sessions[key] = _factory(placement)
        return session


def close_sessions() -> None:
    """Close every session started so far."""
    with _lock:
        sessions = list(_sessions.values())
        _sessions.clear()
    for s in sessions:
        s.close()


def set_session_factory(factory: SessionFactory | None) -> SessionFactory:
    """Use `factory` for new sessions (None: the default); closes the current ones. Returns the
    previous factory."""
    global _factory
    close_sessions()
    with _lock:
        previous, _factory = _factory, factory or _default_session_factory
    return previous


_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="tcl-remote")
        return _pool


class RemoteFunction:
    """A function that runs on the session for its placement. Calling it blocks and returns
    the result; `.submit()` returns a Future; `.local` is the plain function."""

    def __init__(self, fn: types.FunctionType, placement: Placement) -> None:
        if not isinstance(fn, types.FunctionType):
            raise TypeError(f"@remote needs a plain function, not {type(fn).__name__}")
        self.local = fn
        self.placement = dict(placement)
        self.last_stats: CallStats | None = None
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<remote function {self.local.__qualname__} {self.placement}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Pickled (and checked) before any session is started or reached.
        shipment = prepare(self.local, args, kwargs)
        conn, token = session_for(self.placement).connect()
        try:
            return exchange(conn, shipment, token=token)
        finally:
            self.last_stats = last_call_stats()

    def submit(self, *args: Any, **kwargs: Any) -> Future[Any]:
        """Start the call in the background. The globals are captured now, and written back
        when it finishes."""
        shipment = prepare(self.local, args, kwargs)

        def run() -> Any:
            conn, token = session_for(self.placement).connect()
            try:
                return exchange(conn, shipment, token=token)
            finally:
                self.last_stats = last_call_stats()

        return _executor().submit(run)


def remote(fn: Any = None, /, **placement: Any) -> Any:
    """`@remote` or `@remote(chip="h100", chips=1, host=..., image=..., env=...,
    cluster="hpc", avoid_cluster=["slow"])`: run the function remotely (the same placement
    options as `tcl submit`; none: the local default)."""
    if fn is None:
        return lambda f: RemoteFunction(f, placement)
    if placement:
        raise TypeError("use @remote(...) with keyword options, or @remote bare")
    return RemoteFunction(fn, {})
