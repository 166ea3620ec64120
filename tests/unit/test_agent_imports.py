"""The two agents import nothing of each other: what both speak lives in ``tcl.common``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

RUNNER = ["tcl.runner.main", "tcl.runner.batch", "tcl.runner.nodemount", "tcl.runner.server"]
SHIM = ["tcl.shim.main", "tcl.shim.server", "tcl.shim.clusterfs"]


def loaded(modules: list[str]) -> list[str]:
    """The tcl modules a fresh interpreter has loaded after importing ``modules``."""
    code = (
        f"import importlib, json, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('tcl.'))))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    out: list[str] = json.loads(res.stdout)
    return out


@pytest.mark.parametrize(
    "modules,other", [(RUNNER, "tcl.shim"), (SHIM, "tcl.runner")], ids=["runner", "shim"]
)
def test_an_agent_loads_nothing_of_the_other(modules: list[str], other: str) -> None:
    mods = loaded(modules)
    assert set(modules) <= set(mods)
    assert [m for m in mods if m == other or m.startswith(other + ".")] == []
