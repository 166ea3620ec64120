"""@remote without a worker: the globals a function takes along, and the worker's own limits (it
imports only the stdlib and cloudpickle, and will not start without a token). The calls through
a real worker subprocess are tests/integration/remote/test_remote.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

from tcl.remote.capture import referenced_globals, ships_by_value
from tests.unit.remote.conftest import notebook


def _module_level() -> int:
    return 1


def test_referenced_globals_follow_helpers_and_closures() -> None:
    ns = notebook(
        """
        import os
        a, b, c, unused = 1, 2, 3, 4
        def helper():
            return b + len(os.sep)
        def make():
            def inner():
                return c
            return inner
        inner = make()
        def fn():
            global created
            created = [x + a for x in range(2)]
            return helper() + inner() + (lambda: a)()
        """
    )
    names = referenced_globals(ns["fn"])
    # `c` is read by the helper bound to the global `inner`; no os, range, len or unused
    assert names == ["a", "b", "c", "created", "helper", "inner"]
    assert ships_by_value(ns["fn"])
    assert isinstance(_module_level, types.FunctionType)
    assert not ships_by_value(_module_level)  # importable: goes by reference


def test_the_worker_imports_only_the_stdlib_and_cloudpickle() -> None:
    # It runs in the user's image: tcl's own dependencies (pydantic, ...) are not there.
    probe = (
        "import json, sys, tcl.remote.worker\n"
        "tops = {m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names)\n"
        "print(json.dumps(sorted(tops)))\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('tcl'))))\n"
    )
    # not measured by coverage (the test command's): its modules would be in sys.modules too
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
    ).stdout.splitlines()
    assert set(json.loads(out[0])) <= {"tcl", "cloudpickle", "__main__"}, out[0]
    assert json.loads(out[1]) == [
        "tcl",
        "tcl.remote",
        "tcl.remote.errors",
        "tcl.remote.gate",
        "tcl.remote.outcome",
        "tcl.remote.payload",
        "tcl.remote.wire",
        "tcl.remote.worker",
    ]


def test_the_worker_will_not_start_without_a_token() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TCL_SESSION_TOKEN"}
    env["TCL_SESSION_PORT"] = "1"
    r = subprocess.run(
        [sys.executable, "-m", "tcl.remote.worker"], env=env, capture_output=True, text=True
    )
    assert r.returncode != 0
    assert "TCL_SESSION_TOKEN" in r.stderr
