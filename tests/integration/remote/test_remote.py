"""@remote through a real worker subprocess: results, globals written back, output, errors,
interrupts, conflicts and the handshake."""

from __future__ import annotations

import io
import os
import signal
import threading
import time

import pytest

from tcl.remote import wire
from tcl.remote.call import exchange, last_call_stats
from tcl.remote.capture import prepare
from tcl.remote.decorator import remote
from tcl.remote.errors import UnpicklableError, VersionMismatch, WorkerRefused
from tcl.remote.local import SubprocessSession
from tcl.remote.writeback import ConflictWarning
from tests.integration.remote.conftest import WORKER_HASHSEED, CountingSession
from tests.unit.remote.conftest import notebook

MiB = 1 << 20


def test_result_and_globals_come_back(session: CountingSession) -> None:
    ns = notebook(
        """
        history = [0]
        alias = history
        counter = 1
        config = {"lr": 0.1}

        def helper(n):
            config["calls"] = n

        def step(n):
            global counter, created
            history.append(n)
            counter += n
            created = f"made by step({n})"
            helper(n)
            return n * 10
        """
    )
    f = remote(ns["step"])
    assert f(3) == 30
    assert ns["history"] == [0, 3]
    assert ns["alias"] is ns["history"]
    assert ns["counter"] == 4
    assert ns["created"] == "made by step(3)"
    assert ns["config"] == {"lr": 0.1, "calls": 3}
    assert f.last_stats is not None
    assert f.last_stats.changed == ["config", "counter", "created", "history"]
    assert session.connects == 1


def test_untouched_big_array_and_set_are_not_sent_back(session: CountingSession) -> None:
    assert os.environ.get("PYTHONHASHSEED") != WORKER_HASHSEED
    ns = notebook(
        """
        import numpy as np
        big = np.ones(4 * 1024 * 1024, dtype=np.float32)  # 16 MiB, only read
        small = np.zeros(4)
        tags = {"alpha", "beta", "gamma", "delta"}

        def touch():
            small[1] = float(big[:3].sum()) + len(tags)
        """
    )
    small = ns["small"]
    f = remote(ns["touch"])
    f()
    stats = f.last_stats
    assert stats is not None
    assert stats.bytes_sent > 16 * MiB
    assert stats.bytes_received < 1 * MiB
    assert stats.changed == ["small"]
    assert ns["small"] is small  # written in place
    assert small.tolist() == [0.0, 7.0, 0.0, 0.0]


def test_unpicklable_globals_are_all_named_before_anything_is_sent(
    session: CountingSession,
) -> None:
    ns = notebook(
        """
        import threading
        lock = threading.Lock()
        gen = (i for i in range(3))
        fine = [1]

        def use():
            with lock:
                return next(gen) + fine[0]
        """
    )
    with pytest.raises(UnpicklableError) as info:
        remote(ns["use"])()
    msg = str(info.value)
    assert "global 'lock' (_thread.lock) cannot be pickled" in msg
    assert "global 'gen' (generator) cannot be pickled" in msg
    assert "fine" not in msg
    assert set(info.value.failures) == {"global 'lock'", "global 'gen'"}
    assert session.connects == 0


def test_remote_exception_is_reraised_with_the_remote_line(session: CountingSession) -> None:
    ns = notebook(
        """
        def inner(d):
            return 1 / d  # the failing line

        def outer():
            return inner(0)
        """
    )
    with pytest.raises(ZeroDivisionError) as info:
        remote(ns["outer"])()
    cause = info.value.__cause__
    assert type(cause).__name__ == "RemoteTraceback"
    text = str(cause)
    assert "return 1 / d  # the failing line" in text
    assert "line 3, in inner" in text
    assert "tcl/remote/worker.py" not in text  # starts in the user's code


class _Timed(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.times: list[tuple[float, str]] = []

    def write(self, s: str) -> int:
        self.times.append((time.monotonic(), s))
        return super().write(s)


def test_output_arrives_while_the_call_runs(
    session: CountingSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = notebook(
        """
        import sys, time
        def chatty():
            print("first")
            print("to stderr", file=sys.stderr)
            time.sleep(1.5)
            print("second")
            return "done"
        """
    )
    out, err = _Timed(), _Timed()
    monkeypatch.setattr("sys.stdout", out)
    monkeypatch.setattr("sys.stderr", err)
    assert remote(ns["chatty"])() == "done"
    returned = time.monotonic()
    monkeypatch.undo()
    assert out.getvalue() == "first\nsecond\n"
    assert err.getvalue() == "to stderr\n"
    first_seen = next(t for t, s in out.times if "first" in s)
    assert returned - first_seen > 1.0


def test_interrupt_stops_a_long_call_and_the_worker_serves_on(session: CountingSession) -> None:
    ns = notebook(
        """
        import time
        def slow():
            time.sleep(60)

        def quick():
            return "still here"
        """
    )
    main = threading.main_thread().ident
    assert main is not None
    timer = threading.Timer(1.0, signal.pthread_kill, (main, signal.SIGINT))
    started = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt) as info:
        remote(ns["slow"])()
    assert time.monotonic() - started < 30  # stopped, not the 60 s call run out
    assert "time.sleep(60)" in str(info.value.__cause__)
    assert remote(ns["quick"])() == "still here"


def test_submit_returns_a_future(session: CountingSession) -> None:
    ns = notebook(
        """
        results = []
        def add(a, b=0):
            results.append(a + b)
            return a + b
        """
    )
    fut = remote(ns["add"]).submit(2, b=5)
    assert fut.result(timeout=30) == 7
    assert ns["results"] == [7]


def test_a_local_change_during_the_call_is_a_conflict(session: CountingSession) -> None:
    ns = notebook(
        """
        import time
        losses = [1.0]
        steps = 0
        def train():
            global steps
            time.sleep(1.0)
            losses.append(0.5)
            steps += 1
        """
    )
    f = remote(ns["train"])
    with pytest.warns(ConflictWarning, match="losses"):
        fut = f.submit()
        ns["losses"].append(0.9)  # the notebook moved on while the call ran
        fut.result(timeout=30)
    assert ns["losses"] == [1.0, 0.9]  # not overwritten
    assert ns["steps"] == 1  # no conflict there: written back
    assert f.last_stats is not None
    assert f.last_stats.conflicts == ["losses"]


def test_jax_arrays_come_back_as_jax_arrays(session: CountingSession) -> None:
    ns = notebook(
        """
        import jax.numpy as jnp
        params = jnp.ones(3)
        def update():
            global params
            params = params * 2
            return params.sum()
        """
    )
    import jax

    total = remote(ns["update"])()
    assert isinstance(total, jax.Array)
    assert float(total) == 6.0
    assert isinstance(ns["params"], jax.Array)
    assert ns["params"].tolist() == [2.0, 2.0, 2.0]


def test_wrong_token_is_refused(worker: SubprocessSession) -> None:
    ns = notebook("def f():\n    return 1\n")
    conn, token = worker.connect()
    with pytest.raises(WorkerRefused, match="wrong session token"):
        exchange(conn, prepare(ns["f"], (), {}), token=token + "x")


def test_version_mismatch_is_explained(
    worker: SubprocessSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = wire.local_versions()
    fake = {**real, "python": "3.99.0"}
    monkeypatch.setattr(wire, "local_versions", lambda: fake)  # the module call.py uses
    ns = notebook("def f():\n    return 1\n")
    conn, token = worker.connect()
    with pytest.raises(
        VersionMismatch, match=rf"the remote Python is {real['python']}, this one 3.99.0"
    ):
        exchange(conn, prepare(ns["f"], (), {}), token=token)


def test_round_trip_time(session: CountingSession) -> None:
    ns = notebook("def f(x):\n    return x\n")
    f = remote(ns["f"])
    f(0)
    started = time.monotonic()
    for i in range(10):
        assert f(i) == i
    per_call = (time.monotonic() - started) / 10
    print(f"round trip through SubprocessSession: {per_call * 1000:.1f} ms")
    assert per_call < 2.0


def test_a_200_mib_argument_is_sent_once_across_three_calls(session: CountingSession) -> None:
    ns = notebook(
        """
        import numpy as np
        big = np.arange(50 * MiB, dtype=np.float32)  # 200 MiB

        def total(a, k):
            return float(a[::4096].sum()) + k
        """,
        {"__name__": "__main__", "MiB": MiB},
    )
    f = remote(ns["total"])
    want = float(ns["big"][::4096].sum())
    sent = []
    for k in range(3):
        assert f(ns["big"], k) == want + k
        assert f.last_stats is not None
        sent.append(f.last_stats.bytes_sent)
    assert sent[0] > 200 * MiB and max(sent[1:]) < MiB, sent  # then by digest only


def test_an_array_changed_by_the_call_or_here_is_sent_again(session: CountingSession) -> None:
    ns = notebook(
        """
        import numpy as np
        arr = np.zeros(2 * MiB, dtype=np.uint8)

        def bump(a):
            a[0] += 1
            return int(a[0])
        """,
        {"__name__": "__main__", "MiB": MiB},
    )
    f = remote(ns["bump"])
    assert f(ns["arr"]) == 1 and ns["arr"][0] == 1  # the caller's array, mutated in place
    assert f(ns["arr"]) == 2 and ns["arr"][0] == 2  # not the worker's stale copy
    assert f.last_stats is not None and f.last_stats.bytes_sent > 2 * MiB  # its content changed
    ns["arr"][1] = 7  # changed here: a new digest, sent again
    assert f(ns["arr"]) == 3 and f.last_stats.bytes_sent > 2 * MiB
    # back to the first content: the worker's copy of it was changed by the first call, so it
    # must not answer for it any more
    ns["arr"][:] = 0
    assert f(ns["arr"]) == 1 and f.last_stats.bytes_sent > 2 * MiB


def test_a_worker_that_dropped_an_array_gets_it_again() -> None:
    """Its cache is bounded (`TCL_REMOTE_BLOB_CACHE_BYTES`): a call that refers to a dropped
    array is answered "missing", and the client sends the call again with its arrays."""
    worker = SubprocessSession(env={"TCL_REMOTE_BLOB_CACHE_BYTES": str(3 * MiB)})
    try:
        ns = notebook(
            """
            import numpy as np
            one = np.ones(2 * MiB, dtype=np.uint8)
            two = np.full(2 * MiB, 2, dtype=np.uint8)

            def first(a):
                return int(a[0])
            """,
            {"__name__": "__main__", "MiB": MiB},
        )
        results, sent = [], []
        for arr in ("one", "two", "one"):  # "two" pushes "one" out of the worker's cache
            conn, token = worker.connect()
            shipment = prepare(ns["first"], (ns[arr],), {})
            results.append(exchange(conn, shipment, token=token))
            sent.append(last_call_stats().bytes_sent)
        assert results == [1, 2, 1]
        assert min(sent) > 2 * MiB, sent  # the third call sent "one" again, when told
    finally:
        worker.close()
