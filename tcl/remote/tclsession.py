"""The real transport of ``@tcl.remote``: a ``remote`` session run, placed like ``tcl submit``.

The first call submits the session (through the ``tcl serve`` daemon, which follows it and
frees its accelerators when it ends, else in this process), waits until its call server
answers, and opens a local port forwarded to it (``tcl.control.interactive``); every call is
then one TCP connection to that port. The session's control plane (store, SSH connections,
the forward) lives on an event loop of its own, in a daemon thread, so a notebook's kernel
(which runs its own loop) and a plain script use it alike. ``close()`` (at exit, or
``tcl.remote.decorator.close_sessions()``) stops the run.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import socket
import sys
import threading
from collections.abc import Coroutine, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tcl.agentenv import submitter_env
from tcl.remote.errors import RemoteError

if TYPE_CHECKING:
    from tcl.control.service import Control
    from tcl.control.submitted import SubmitResult
    from tcl.control.transport.portforward import PortForward

T = TypeVar("T")
READY_TIMEOUT_S = 900.0
# Placement keys @tcl.remote takes: the same as `tcl submit`'s flags.
PLACEMENT_KEYS = frozenset(
    {"chip", "chips", "host", "image", "env", "name", "max_duration_s", "nodes"}
)


class SessionStartError(RemoteError):
    """The remote session could not be placed or did not answer (the reason is tcl's)."""


class TclSession:
    def __init__(self, placement: Mapping[str, Any], cwd: Path | None = None) -> None:
        unknown = sorted(set(placement) - PLACEMENT_KEYS)
        if unknown:
            raise TypeError(
                f"@tcl.remote got unknown option(s) {', '.join(unknown)} "
                f"(it takes {', '.join(sorted(PLACEMENT_KEYS))})"
            )
        self.placement = dict(placement)
        self.cwd = cwd or Path.cwd()
        self.run_id: str | None = None
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ctl: Control | None = None
        self._forward: PortForward | None = None
        self._port = 0
        self._token = ""
        atexit.register(self.close)

    # -- Session -----------------------------------------------------------------------

    def connect(self) -> tuple[socket.socket, str]:
        with self._lock:
            if self._forward is None:
                self._start()
        return socket.create_connection(("127.0.0.1", self._port), timeout=60), self._token

    def close(self) -> None:
        with self._lock:
            loop, self._loop = self._loop, None
            if loop is None:
                return
            try:
                self._run_on(loop, self._shutdown(), timeout_s=60)
            except Exception as e:  # closing must not raise at exit
                print(f"tcl.remote: stopping run {self.run_id}: {e}", file=sys.stderr)
            finally:
                loop.call_soon_threadsafe(loop.stop)

    # -- start -------------------------------------------------------------------------

    def _start(self) -> None:
        from tcl.control.errors import TclError

        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, name="tcl-remote", daemon=True).start()
        self._loop = loop
        try:
            res = self._submit()
            self.run_id = res.run_id
            print(f"tcl.remote: session {res.run_id} on {res.host}", file=sys.stderr)
            self._run_on(loop, self._open(res.run_id), timeout_s=READY_TIMEOUT_S + 30)
        except TclError as e:
            raise SessionStartError(f"cannot start the remote session: {e}") from None

    def _request(self) -> Any:
        from tcl.control.daemon.api import SubmitRequest
        from tcl.control.paths import config_path
        from tcl.runner.api import SessionKind

        path, named = config_path()
        p = self.placement
        chip = str(p["chip"]).lower() if p.get("chip") else None
        chips = int(p.get("chips") or 0)
        return SubmitRequest(
            config_path=os.path.abspath(path),
            config_named=named,
            cwd=str(self.cwd),
            name=str(p.get("name") or ""),
            chip=chip,
            chips=chips if chips or chip is None else 1,
            nodes=int(p.get("nodes") or 0),
            host=p.get("host"),
            clusters=_names(p.get("cluster")),
            avoid_clusters=_names(p.get("avoid_cluster")),
            image=p.get("image"),
            env={str(k): str(v) for k, v in dict(p.get("env") or {}).items()},
            submitter_base=submitter_env(os.environ),
            max_duration_s=p.get("max_duration_s"),
            follow=False,
            session=SessionKind.REMOTE,
        )

    def _submit(self) -> SubmitResult:
        """Through the daemon (it follows the run and frees it at its end), else here."""
        from tcl.control.daemon.api import LineKind
        from tcl.control.daemon.client import ensure_daemon
        from tcl.control.errors import DaemonError, TclError

        req = self._request()
        if os.environ.get("TCL_SERVE", "1") != "0":
            try:
                client = ensure_daemon()
            except DaemonError:
                client = None
            if client is not None:
                lines = client.submit(req)
                try:
                    for line in lines:
                        if line.kind is LineKind.SUBMITTED and line.result is not None:
                            return line.result
                        if line.kind is LineKind.ERROR:
                            raise TclError(line.text)
                finally:
                    lines.close()
                raise TclError("tcl serve ended the submit without a result")
        assert self._loop is not None
        return self._run_on(self._loop, self._submit_here(req), timeout_s=READY_TIMEOUT_S)

    async def _submit_here(self, req: Any) -> SubmitResult:
        from tcl.control.lifecycle.submit import submission_from, submit

        return await submit(self._control(), submission_from(req), check_job=False)

    def _control(self) -> Control:
        if self._ctl is None:
            from tcl.control.config import load_config
            from tcl.control.service import Control

            self._ctl = Control(load_config(None))
        return self._ctl

    async def _open(self, run_id: str) -> None:
        from tcl.control import interactive

        ctl = self._control()
        tgt, info = await interactive.wait_ready(ctl, run_id, READY_TIMEOUT_S)
        fwd = interactive.forward(tgt)
        self._port = await fwd.start()
        self._token = info.token
        self._forward = fwd

    async def _shutdown(self) -> None:
        from tcl.control.lifecycle.stop import stop

        ctl = self._ctl
        try:
            if self._forward is not None:
                await self._forward.aclose()
            if ctl is not None and self.run_id is not None:
                await stop(ctl, ctl.store.get_run(self.run_id), grace_s=5.0)
        finally:
            if ctl is not None:
                await ctl.aclose()
            self._forward = None

    @staticmethod
    def _run_on(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T], timeout_s: float
    ) -> T:
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, loop)
        return fut.result(timeout=timeout_s)


def _names(value: Any) -> list[str]:
    """``cluster="a"`` or ``cluster=["a", "b"]`` of ``@tcl.remote(...)``."""
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


def tcl_session_factory(placement: Mapping[str, Any]) -> TclSession:
    return TclSession(placement)
