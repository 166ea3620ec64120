"""@tcl.remote's write-back against an oracle: the same notebook cells run with the function
called here and called through a real worker, and every global, alias and returned value is
compared, identity relations included (issue 30). Before, a rebound global was overwritten in
place (the array the user kept as ``r1`` changed; an alias of a rebound list changed), a
deleted global stayed, and a mutated argument stayed as it was."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tcl.remote.decorator import remote
from tests.integration.remote.conftest import CountingSession
from tests.integration.tclcli import stop_local_shim_and_tasks, user_env
from tests.unit.remote.conftest import notebook

CHECKOUT = Path(__file__).resolve().parents[3]

STATE = """
import numpy as np
import jax.numpy as jnp

x = np.zeros(3)
r1 = x                 # what the user kept of x before the call
hist = [1]
hist_alias = hist      # an alias of a list the call binds anew
seen = [1]
seen_alias = seen      # an alias of a list the call appends to
box = {"a": 1}
gone = "bye"
a = [7]
b = a                  # two names, one object, mutated by the call
other = [5]
moved = None
ja = jnp.ones(2)
ja_kept = ja
arg = [1, 2]
kw = {"k": 1}

class Cfg:
    pass

cfg = Cfg()
cfg.lr = 0.1
cfg_alias = cfg

def f(xs, opts=None):
    global x, hist, gone, moved, ja
    x = np.ones(3)
    hist = [9]
    seen.append(2)
    box["b"] = 2
    del gone
    a.append(8)
    moved = other          # bound to another global's object
    ja = ja * 2
    cfg.lr = 0.2
    xs.append(3)           # arguments mutated in place
    opts["k"] = 2
    return seen            # the returned object is a global's
"""
CALL = "res = CALL(f)(arg, opts=kw)"
NAMES = [
    "x",
    "r1",
    "hist",
    "hist_alias",
    "seen",
    "seen_alias",
    "box",
    "gone",
    "a",
    "b",
    "other",
    "moved",
    "ja",
    "ja_kept",
    "arg",
    "kw",
    "cfg",
    "cfg_alias",
    "res",
]

# The same cells run by a user's Python with the real `tcl.remote` (a run on a host tcl
# places it on): prints both states, here's and there's, as JSON.
THROUGH_TCL = """
import json, sys
sys.path.insert(0, {checkout!r})
import tcl
from tcl.remote import decorator
from tests.integration.remote.test_writeback_oracle import CALL, STATE, state_of
from tests.unit.remote.conftest import notebook

here = notebook(STATE)
here["CALL"] = lambda fn: fn
notebook(CALL, here)
there = notebook(STATE)
there["CALL"] = tcl.remote(**{placement!r})
notebook(CALL, there)
print("ORACLE", json.dumps([state_of(here), state_of(there)]), flush=True)
decorator.close_sessions()
"""


def _value(v: Any) -> Any:
    if hasattr(v, "__array__") and not isinstance(v, list | dict):
        return ("array", np.asarray(v).tolist())
    if hasattr(v, "__dict__") and not isinstance(v, type):
        return ("object", type(v).__name__, dict(vars(v)))
    return v


def state_of(ns: dict[str, Any]) -> dict[str, Any]:
    present = [n for n in NAMES if n in ns]
    return {
        "absent": sorted(set(NAMES) - set(present)),
        "values": {n: _value(ns[n]) for n in present},
        # which names are one object: the identity relations Python gives locally
        "same": sorted((p, q) for p, q in itertools.combinations(present, 2) if ns[p] is ns[q]),
    }


def test_a_remote_call_changes_the_notebook_as_a_local_call_would(
    session: CountingSession,
) -> None:
    here = notebook(STATE)
    here["CALL"] = lambda fn: fn
    notebook(CALL, here)
    there = notebook(STATE)
    there["CALL"] = remote
    notebook(CALL, there)
    expected, got = state_of(here), state_of(there)
    assert_same(expected, got)
    assert there["r1"].tolist() == [0.0, 0.0, 0.0] and there["hist_alias"] == [1]
    assert session.connects == 1


def assert_same(expected: dict[str, Any], got: dict[str, Any]) -> None:
    """The notebook after the remote call is the notebook after the local one."""
    assert got["absent"] == expected["absent"] == ["gone"]
    assert got["same"] == expected["same"], (got["same"], expected["same"])
    for name, value in expected["values"].items():
        assert got["values"][name] == value, name


def oracle_through_tcl(
    env: dict[str, str], cwd: Path, **placement: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The cells run locally and through a real `@tcl.remote(**placement)` run, by a Python of
    the user's (``env``: its HOME and config); both states, as JSON gives them back."""
    script = THROUGH_TCL.format(checkout=str(CHECKOUT), placement=placement)
    res = subprocess.run(
        [sys.executable, "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("ORACLE "))
    expected, got = json.loads(line.removeprefix("ORACLE "))
    return expected, got


@pytest.mark.timeout(300)
def test_a_call_through_a_run_on_the_local_default_changes_the_notebook_as_a_local_call(
    tmp_path: Path,
) -> None:
    """The oracle through the real path: `tcl.remote` submits a `remote` session run on the
    local default (no config), and the write-back crosses the runner's forward."""
    home, repo = tmp_path / "home", tmp_path / "repo"
    home.mkdir()
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    try:
        expected, got = oracle_through_tcl(user_env(home), repo)
        assert_same(expected, got)
    finally:
        stop_local_shim_and_tasks(home / "state" / "local-shim")
