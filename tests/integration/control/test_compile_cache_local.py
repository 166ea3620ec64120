"""JAX's persistent compilation cache on the local default: a second run of the same program
(as a retry or a requeue after preemption would be) finds its compiled computation there."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conftest import SESSION_JAX_CACHE
from tests.integration.tclcli import run_tcl, stop_local_shim_and_tasks, user_env

PROGRAM = """
import json, os, time
import jax, jax.numpy as jnp

cache = os.environ.get("JAX_COMPILATION_CACHE_DIR", "")
def entries():
    return len(os.listdir(cache)) if cache and os.path.isdir(cache) else -1

@jax.jit
def f(x):
    for _ in range(20):
        x = jnp.tanh(x @ x.T) + 1
    return x

before = entries()
t = time.perf_counter()
f(jnp.ones((32, 32))).block_until_ready()
took = time.perf_counter() - t
print(json.dumps({"cache": cache, "before": before, "after": entries(), "took": took}))
"""


def test_a_second_run_finds_its_compiled_program_in_the_hosts_cache(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (work / "prog.py").write_text(PROGRAM)
    env = user_env(home, drop=("TCL_CONFIG", "TCL_DB_URL", *SESSION_JAX_CACHE))
    # cache even this small program (JAX's default: compiles over 1 s only)
    argv = ["submit", "--env", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0", "--"]
    try:
        runs = []
        for _ in range(2):
            # this venv's python: JAX is installed there
            res = run_tcl([*argv, sys.executable, "prog.py"], env, work, check=False, timeout=180)
            assert res.returncode == 0, res.stderr
            runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
        first, second = runs
        # the host's cache (beside its code cache), the same for both runs
        assert first["cache"] == second["cache"]
        assert Path(first["cache"]).is_relative_to(home / "state" / "local-shim")
        assert first["before"] == 0 and first["after"] > 0, first  # compiled and kept
        # found: the second run compiled nothing new (a miss would have added an entry)
        assert second["before"] == second["after"] == first["after"], runs
        print(f"compile+run: first {first['took']:.3f} s, second {second['took']:.3f} s")
    finally:
        stop_local_shim_and_tasks(home / "state" / "local-shim")
