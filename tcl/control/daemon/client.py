"""The ``tcl serve`` daemon's typed client, and starting the daemon when none answers.

Synchronous and on the standard library's ``http.client``: the CLI's path to the daemon must
start in tens of milliseconds, so it imports no asyncio HTTP stack; each stream is one request
whose response is read a JSON line at a time.

The daemon is reached through ``<state dir>/serve/daemon.sock`` only, and each connection first
asks the kernel who listens (``SO_PEERCRED``): a listener of another user gets no byte (no
request, no secret). The pid that may be stopped is the kernel's, never one the daemon states.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tcl.agentenv import daemon_env
from tcl.control.daemon.api import (
    Failure,
    FollowRequest,
    Health,
    Identity,
    Line,
    RunEnd,
    Status,
    StopRequest,
    SubmitRequest,
)
from tcl.control.daemon.identity import current_identity, daemon_dir, refusal, shares
from tcl.control.detached import ensure_started, spawn_until, stop_pid
from tcl.control.errors import AgentError, DaemonError, TclError
from tcl.localhttp import UnixHTTPConnection
from tcl.localsock import PeerError

if TYPE_CHECKING:  # each listing's models are imported by its own call: a submit needs none
    from tcl.control.hostlisting import HostListing, HostsRequest
    from tcl.control.matrixlisting import MatrixStatusListing, MatrixStatusRequest
    from tcl.control.metriclisting import MetricsListing, MetricsRequest
    from tcl.control.runlisting import ListRequest, RunListing

SOCKET = "daemon.sock"  # tcl.control.daemon.server listens there
START_TIMEOUT_S = 30.0
LISTING_TIMEOUT_S = 300.0
STOP_SLACK_S = 300.0  # a stop waits up to its grace, then for the host (bounded by its budget)
DEFAULT_IDLE_EXIT_S = 1800.0  # a daemon tcl started itself goes after 30 min with nothing to do


class LineStream:
    """The lines of one streamed response. An iterator object, not a generator: a Ctrl-C
    (KeyboardInterrupt) while it waits for a line leaves it usable, so the CLI can ask for a
    cancel and go on reading until the daemon says how the submit ended."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self._conn = conn
        self._resp = resp

    def __iter__(self) -> LineStream:
        return self

    def __next__(self) -> Line:
        try:
            raw = self._resp.readline()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise DaemonError(f"the connection to tcl serve broke: {e}") from None
        if not raw:
            self.close()
            raise StopIteration
        return Line.model_validate_json(raw)

    def close(self) -> None:
        self._conn.close()


class DaemonClient:
    def __init__(self, path: Path, pid: int) -> None:
        self.path = path
        self.pid = pid  # the listener's, as the kernel reported it

    def _conn(self, timeout_s: float | None) -> http.client.HTTPConnection:
        return UnixHTTPConnection(self.path, "tcl serve", timeout_s)

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout_s: float = 10.0,
        ok: frozenset[int] = frozenset(),
    ) -> Any:
        """The JSON answer; a status of 400 or more not in ``ok`` is a ``DaemonError``."""
        conn = self._conn(timeout_s)
        try:
            data, headers = self._body(body)
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise DaemonError(f"tcl serve at {self.path}: {e}") from None
        finally:
            conn.close()
        if resp.status == 400 and resp.status not in ok:
            raise _failure(payload)
        if resp.status >= 400 and resp.status not in ok:
            raise DaemonError(f"tcl serve: {method} {path}: {resp.status} {payload[:300]!r}")
        return json.loads(payload) if payload and resp.status < 400 else None

    def list_runs(self, req: ListRequest) -> RunListing:
        """``tcl ps``'s listing, non-final runs refreshed (a host that does not answer is
        asked within its own bounded budget)."""
        from tcl.control.runlisting import RunListing

        return RunListing.model_validate(self._request("POST", "/api/runs", req, LISTING_TIMEOUT_S))

    def list_hosts(self, req: HostsRequest) -> HostListing:
        """``tcl hosts``'s listing (with ``check``, each host asked within its own budget)."""
        from tcl.control.hostlisting import HostListing

        return HostListing.model_validate(
            self._request("POST", "/api/hosts", req, LISTING_TIMEOUT_S)
        )

    def list_metrics(self, req: MetricsRequest) -> MetricsListing:
        """``tcl metrics``'s points, once the run's host was asked for what is not kept yet."""
        from tcl.control.metriclisting import MetricsListing

        return MetricsListing.model_validate(
            self._request("POST", "/api/metrics", req, LISTING_TIMEOUT_S)
        )

    def matrix_status(self, req: MatrixStatusRequest) -> MatrixStatusListing:
        """Where the named matrix (or each one) stands."""
        from tcl.control.matrixlisting import MatrixStatusListing

        return MatrixStatusListing.model_validate(
            self._request("POST", "/api/matrices/status", req, LISTING_TIMEOUT_S)
        )

    def stop(self, req: StopRequest) -> RunEnd:
        """Stop a run; answered once its job is stopped and what it held is free."""
        timeout_s = req.grace_s + STOP_SLACK_S
        return RunEnd.model_validate(self._request("POST", "/api/stop", req, timeout_s))

    def _body(self, body: Any) -> tuple[bytes | None, dict[str, str]]:
        if body is None:
            return None, {}
        return body.model_dump_json().encode(), {"Content-Type": "application/json"}

    def _stream(self, path: str, body: SubmitRequest | FollowRequest) -> LineStream:
        conn = self._conn(None)  # a follow may wait for hours between lines
        data, headers = self._body(body)
        try:
            conn.request("POST", path, body=data, headers=headers)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise DaemonError(f"tcl serve at {self.path}: {e}") from None
        if resp.status >= 400:
            detail = resp.read()[:300]
            conn.close()
            raise DaemonError(f"tcl serve: {path}: {resp.status} {detail!r}")
        return LineStream(conn, resp)

    def submit(self, req: SubmitRequest) -> LineStream:
        return self._stream("/api/submit", req)

    def follow(self, req: FollowRequest) -> LineStream:
        return self._stream("/api/follow", req)

    def cancel(self, submission: str) -> None:
        """Ask for a submit to be cancelled; its stream then ends with its ``error`` line.
        Too late (it started, or ended) is not an error: the stream says what happened."""
        self._request("POST", f"/api/submissions/{submission}/cancel", ok=frozenset({404}))

    def status(self) -> Status:
        return Status.model_validate(self._request("GET", "/api/status"))

    def forget_host(self, name: str) -> None:
        self._request("POST", f"/api/hosts/{name}/forget")

    def shutdown(self) -> None:
        self._request("POST", "/api/shutdown")


def _failure(payload: bytes) -> TclError:
    """The user's error the daemon answered (400), as the CLI would have raised it."""
    try:
        f = Failure.model_validate_json(payload)
    except ValueError:
        return DaemonError(f"tcl serve: 400 {payload[:300]!r}")
    e = TclError(f.detail)
    e.exit_code = f.exit_code
    return e


def _health(path: Path) -> tuple[Health, int] | None:
    """The daemon's health and its pid as the kernel reports it; None when nothing of this
    user's answers there (no socket, a dead daemon's leftover, another user's listener)."""
    conn = UnixHTTPConnection(path, "tcl serve", 2.0)
    try:
        conn.request("GET", "/api/healthcheck")
        resp = conn.getresponse()
        if resp.status != 200:
            return None
        return Health.model_validate_json(resp.read()), conn.peer_pid
    except PeerError as e:
        print(f"tcl: {e}", file=sys.stderr)  # someone else's process at our socket: say so
        return None
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        conn.close()


def _answering(base: Path, want: Identity | None = None) -> DaemonClient | None:
    """A client for this state dir's daemon if it answers (and, given ``want``, may be used by
    a client of it: :func:`tcl.control.daemon.identity.shares`)."""
    found = _health(base / SOCKET)
    if found is None or (want is not None and not shares(found[0].identity, want)):
        return None
    return DaemonClient(base / SOCKET, found[1])


def answering_daemon() -> DaemonClient | None:
    """A client for this state dir's daemon if one answers that this code may use; None
    (and none is started): the caller does the work itself, as always with ``TCL_SERVE=0``."""
    if os.environ.get("TCL_SERVE") == "0":
        return None
    return _answering(daemon_dir(), current_identity())


def running_daemon(base: Path | None = None) -> DaemonClient | None:
    """A client for the daemon of this state dir if one answers (whatever it runs)."""
    return _answering(base or daemon_dir())


def ensure_daemon(idle_exit_s: float | None = None) -> DaemonClient:
    """A client for this state dir's daemon, starting one (detached) when none answers or the
    one that does runs other code or another database (it is asked to exit first; its running
    streams end and their CLIs reconnect to the new one)."""
    base = daemon_dir()
    want = current_identity()
    if idle_exit_s is None:
        idle_exit_s = float(os.environ.get("TCL_SERVE_IDLE_EXIT_S", DEFAULT_IDLE_EXIT_S))

    def start() -> DaemonClient:
        found = _health(base / SOCKET)
        if found is not None:  # other code, or started for another home or database
            why = refusal(found[0].identity, want)
            if why is not None:
                raise DaemonError(why)
            stop_pid(found[1])
        return _start(base, want, idle_exit_s)

    return ensure_started(base, lambda: _answering(base, want), start, "tcl serve", START_TIMEOUT_S)


def _start(base: Path, want: Identity, idle_exit_s: float) -> DaemonClient:
    argv = [sys.executable, "-m", "tcl.control.daemon", "--idle-exit-s", str(idle_exit_s)]
    try:
        client, _ = spawn_until(
            argv,
            base / "serve.log",
            lambda: _answering(base, want),
            "tcl serve",
            START_TIMEOUT_S,
            0.02,
            env=daemon_env(os.environ),
        )
    except AgentError as e:
        raise DaemonError(str(e)) from None
    return client


def stop_daemon(base: Path | None = None) -> bool:
    """Stop this state dir's daemon if one runs; whether one did."""
    d = running_daemon(base)
    if d is None:
        return False
    stop_pid(d.pid)
    return True
