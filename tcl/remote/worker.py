"""The remote end: `python -m tcl.remote.worker`, started inside the job's environment.

Listens on 127.0.0.1:$TCL_SESSION_PORT (reached through a port-forward). A gate thread
(:mod:`tcl.remote.gate`) runs every connection's handshake at once, with a deadline, and admits
only clients that prove they hold the key in $TCL_SESSION_TOKEN; the main thread serves the
admitted connections' calls one at a time. It imports only the stdlib, cloudpickle and its
sibling modules: the user's image has the user's packages, not tcl's dependencies. A failed
call never ends it; SIGTERM does."""

from __future__ import annotations

import contextlib
import io
import linecache
import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any

from tcl.remote import gate, outcome, payload, wire
from tcl.remote.errors import ProtocolError

FLUSH_INTERVAL_S = 0.05
# The session's arrays sent once (tcl.remote.payload): at most this many bytes are kept.
_BLOBS = payload.BlobCache(int(os.environ.get("TCL_REMOTE_BLOB_CACHE_BYTES") or 4 << 30))


def _log(msg: str) -> None:
    print(f"tcl.remote.worker[{os.getpid()}]: {msg}", file=sys.__stderr__, flush=True)


class _StreamToFrames(io.TextIOBase):
    """sys.stdout/sys.stderr during a call: text goes out as OUT frames, at each newline or big
    chunk, and a flusher thread sends any partial line within FLUSH_INTERVAL_S (progress bars)."""

    def __init__(self, chan: wire.Channel, name: str) -> None:
        self._chan, self._name = chan, name
        self._pending: list[str] = []
        self._lock = threading.Lock()
        self.broken = False

    @property
    def name(self) -> str:
        return f"<remote {self._name}>"

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            self._pending.append(text)
            eager = "\n" in text or sum(map(len, self._pending)) > 8192
        if eager:
            self.flush()
        return len(text)

    def flush(self) -> None:
        with self._lock:
            text, self._pending = "".join(self._pending), []
            if not text or self.broken:
                return
            try:
                self._chan.send_json(wire.OUT, {"stream": self._name, "text": text})
            except OSError:
                self.broken = True  # the client left; the call goes on (or is interrupted)


class _Conn:
    """One authenticated connection. A reader thread owns the socket's receiving side: it
    queues CALL frames for the main thread and turns INTERRUPT (or the client leaving during a
    call) into a SIGINT to the main thread, so even `time.sleep` ends in KeyboardInterrupt. A
    flusher thread sends partial output lines while a call runs."""

    def __init__(self, chan: wire.Channel) -> None:
        self.chan = chan
        self.calls: queue.Queue[bytes | None] = queue.Queue()
        self._lock = threading.Lock()
        self._running = False
        self._streams: list[_StreamToFrames] = []
        self._main = threading.main_thread().ident
        self._closed = threading.Event()
        threading.Thread(target=self._reader, daemon=True).start()
        threading.Thread(target=self._flusher, daemon=True).start()

    def _reader(self) -> None:
        try:
            while True:
                kind, body = self.chan.recv()
                if kind == wire.CALL:
                    self.calls.put(body)
                elif kind == wire.INTERRUPT:
                    self._interrupt("interrupted by the client")
                else:
                    raise ProtocolError(f"unexpected frame {kind!r}")
        except (OSError, ProtocolError) as e:
            if not isinstance(e, wire.ConnectionClosed):
                _log(f"connection ended: {e}")
            self._interrupt("the client left during the call: nobody will receive the result")
            self.calls.put(None)

    def _flusher(self) -> None:
        while not self._closed.wait(FLUSH_INTERVAL_S):
            for s in list(self._streams):
                s.flush()

    def _interrupt(self, why: str) -> None:
        with self._lock:
            if self._running and self._main is not None:
                _log(why)
                signal.pthread_kill(self._main, signal.SIGINT)

    def start_call(self, streams: list[_StreamToFrames]) -> None:
        with self._lock:
            self._running = True
            self._streams = streams

    def finish_call(self) -> None:
        # Under the lock: no SIGINT is sent once this returns.
        with self._lock:
            self._running = False
        for s in self._streams:
            s.flush()

    def close(self) -> None:
        self._closed.set()


def _run_call(conn: _Conn, body: bytes) -> None:
    """Unpickle, run with live output and interrupts, reply RESULT or ERROR."""
    chan = conn.chan
    streams = [_StreamToFrames(chan, "stdout"), _StreamToFrames(chan, "stderr")]
    conn.start_call(streams)
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = streams
    try:
        blobs, call = payload.loads(body)
        for digest, value in blobs.items():
            _BLOBS.add(digest, value)
        used: dict[bytes, Any] = {}
        fn, args, kwargs, names, sources = payload.loads_call(call, _BLOBS, used)
        for path, lines in sources.items():
            # mtime None: linecache.checkcache keeps the entry (it is how IPython keeps cells).
            linecache.cache[path] = (sum(map(len, lines)), None, lines, path)
        g: dict[str, Any] = fn.__globals__
        was = outcome.before(g, names, args, kwargs)
        result = fn(*args, **kwargs)
        conn.finish_call()
        done = outcome.after(g, names, was, result, args, kwargs)
        _BLOBS.drop_changed(used)
    except BaseException as e:  # the user's code may raise anything, SystemExit included
        conn.finish_call()
        sys.stdout, sys.stderr = saved
        _send_error(chan, e)
        return
    finally:
        sys.stdout, sys.stderr = saved
    try:
        out = payload.dumps(done)
    except Exception as e:
        _send_error(chan, e, note="the result or a changed global could not be pickled")
        return
    chan.send(wire.RESULT, out)


def _send_error(chan: wire.Channel, exc: BaseException, note: str = "") -> None:
    # Drop the worker's own frame: the traceback starts in the user's code.
    tb = exc.__traceback__
    if tb is not None and tb.tb_frame.f_code is _run_call.__code__ and tb.tb_next is not None:
        exc = exc.with_traceback(tb.tb_next)
    text = "".join(traceback.format_exception(exc))
    if note:
        text = f"{note}\n{text}"
    try:
        exc_payload = payload.dumps(exc)
        payload.loads(exc_payload)  # rebuilt here first: a broken reduce must not fail remotely
    except Exception:
        exc_payload = b""
    info = {"type": type(exc).__qualname__, "message": str(exc), "traceback": text}
    chan.send(wire.ERROR, wire.pack_error(info, exc_payload))


DEFAULT_IDLE_S = 3600.0  # TCL_REMOTE_IDLE_S; 0: never


def _serve_connection(chan: wire.Channel) -> None:
    c = _Conn(chan)
    try:
        while (body := c.calls.get()) is not None:
            _run_call(c, body)
    finally:
        c.close()


def serve(port: int, token: str, idle_s: float | None = None) -> None:
    """Serve calls until SIGTERM, or until ``idle_s`` pass without an admitted connection: a
    session whose notebook died without closing it must not hold its accelerators for ever."""
    srv = socket.create_server(("127.0.0.1", port))
    admitted: queue.Queue[wire.Channel | None] = queue.Queue()

    def front_door() -> None:
        try:
            gate.Gate(srv, token, admitted.put).run()
        finally:
            admitted.put(None)  # the gate died: so does the worker, loudly

    threading.Thread(target=front_door, name="tcl-remote-gate", daemon=True).start()
    _log(f"listening on 127.0.0.1:{port}")
    while True:
        try:
            chan = admitted.get(timeout=idle_s)
        except queue.Empty:
            _log(f"no call for {idle_s:.0f}s: ending the session")
            return
        if chan is None:
            raise RuntimeError("the connection gate stopped")
        try:
            _serve_connection(chan)
        except KeyboardInterrupt:
            _log("a late interrupt arrived after the call ended; ignored")
        except (OSError, ProtocolError) as e:
            _log(f"connection ended: {e}")
        finally:
            with contextlib.suppress(OSError):
                chan.sock.shutdown(socket.SHUT_RDWR)  # wakes this connection's reader thread
            chan.close()


def main() -> None:
    token = os.environ.pop("TCL_SESSION_TOKEN", "")  # not inherited by the user's subprocesses
    port = os.environ.get("TCL_SESSION_PORT", "")
    idle = os.environ.get("TCL_REMOTE_IDLE_S", str(DEFAULT_IDLE_S))
    if not token or not port.isdigit():
        sys.exit("tcl.remote.worker: TCL_SESSION_TOKEN and TCL_SESSION_PORT must be set")
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # The user's code may import from the working directory (the shipped repo), as `python x.py`.
    sys.path.insert(0, os.getcwd())
    started = time.monotonic()
    try:
        serve(int(port), token, float(idle) if float(idle) > 0 else None)
    finally:
        _log(f"exiting after {time.monotonic() - started:.0f}s")


if __name__ == "__main__":
    main()
