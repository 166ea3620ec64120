"""The local default under concurrency: many `tcl` processes at once share one shim.

Concurrent callers on a fresh HOME used to start one shim each on the same state dir, crash on
fixed temporary file names, and have the shims kill each other's runners as orphans.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import signal
import time
from pathlib import Path
from typing import Any

import psutil

from tcl.control.localshim import stop_local_shim
from tests.integration.tclcli import run_tcl, start_tcl, user_env

FINAL = {"succeeded", "failed", "terminated", "lost"}


def _local_env(home: Path) -> dict[str, str]:
    """No config, no team database: the local default, with state under ``home``."""
    return user_env(home, drop=("TCL_CONFIG", "TCL_DB_URL"))


def _parallel(env: dict[str, str], cwd: Path, n: int, *args: str) -> list[tuple[int, str, str]]:
    """Start ``n`` identical `tcl` commands at once; (exit code, stdout, stderr) of each."""
    procs = [start_tcl(args, env, cwd) for _ in range(n)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        out.append((p.returncode, stdout, stderr))
    return out


def _failures(results: list[tuple[int, str, str]]) -> list[str]:
    return [err[-3000:] for rc, _, err in results if rc]


def _shims(state: Path) -> list[psutil.Process]:
    """Shim processes serving ``state`` (the local shim's state dir)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        argv = p.info["cmdline"] or []
        is_shim = any(a.endswith("tcl-shim") or "tcl.shim" in a for a in argv)
        flags = itertools.pairwise(argv)
        if is_shim and any(a == "--state-dir" and b == str(state) for a, b in flags):
            found.append(p)
    return found


def _stop_all(base: Path) -> None:
    """Stop the recorded shim, then any stray shim or lingering runner of this test's state
    (finished runners outlive a stopped shim while they keep their logs)."""
    stop_local_shim(base)
    for p in _of(base):
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()


def _of(base: Path) -> list[psutil.Process]:
    """The processes of this test's state: named on their command line, or working in one of
    its task dirs (a runner forked by the shim's fork server has the server's command line)."""
    found = []
    for p in psutil.process_iter(["cmdline", "cwd"]):
        if any(str(base) in a for a in p.info["cmdline"] or []) or str(base) in (
            p.info["cwd"] or ""
        ):
            found.append(p)
    return found


def _ps(env: dict[str, str], cwd: Path) -> list[dict[str, Any]]:
    res = run_tcl(["ps", "-a", "--json"], env, cwd, timeout=120)
    rows: list[dict[str, Any]] = json.loads(res.stdout)
    return rows


def _wait_final(env: dict[str, str], cwd: Path, limit_s: float = 240) -> list[dict[str, Any]]:
    # a bound on waiting, not a timing assertion: 16 runners start on a small shared machine
    deadline = time.monotonic() + limit_s
    while True:
        rows = _ps(env, cwd)
        if all(r["state"] in FINAL for r in rows) or time.monotonic() > deadline:
            return rows
        time.sleep(1)


def test_parallel_detached_submits_on_a_fresh_home_share_one_shim(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = _local_env(home)
    base = home / "state" / "local-shim"
    try:
        results = _parallel(
            env, work, 16, "submit", "-d", "--json", "--", "python3", "-c", "print(1)"
        )
        assert [rc for rc, _, _ in results] == [0] * 16, _failures(results)
        submitted = [json.loads(out)["run_id"] for _, out, _ in results]
        assert len(set(submitted)) == 16
        rows = _wait_final(env, work)
        assert sorted(r["run_id"] for r in rows) == sorted(submitted)  # each recorded once
        assert {r["run_id"]: r["state"] for r in rows} == dict.fromkeys(submitted, "succeeded")
        assert len(_shims(base / "state")) == 1
    finally:
        _stop_all(base)


def test_parallel_commands_after_the_shim_died_start_one_new_shim(tmp_path: Path) -> None:
    """Four CLIs that each need the shim (a host check, in their own processes) find it killed
    under its runs: one new shim is started, which adopts the runs."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = _local_env(home)
    base = home / "state" / "local-shim"
    job = "import time; time.sleep(3600)"
    try:
        for _ in range(3):
            run_tcl(["submit", "-d", "--json", "--", "python3", "-c", job], env, work, timeout=120)
        (old,) = _shims(base / "state")
        old.send_signal(signal.SIGKILL)
        old.wait(timeout=30)
        here = {**env, "TCL_SERVE": "0"}  # each CLI starts the shim itself, not the daemon
        results = _parallel(here, work, 4, "hosts", "--check", "--json")
        assert [rc for rc, _, _ in results] == [0] * 4, _failures(results)
        for _, out, _ in results:
            (local,) = json.loads(out)
            assert local["reachable"] is True, local
        shims = _shims(base / "state")
        assert len(shims) == 1 and shims[0].pid != old.pid
        rows = _ps(env, work)
        assert len(rows) == 3 and all(r["state"] == "running" for r in rows), rows
        # the daemon's client of the old shim has its old token: refused, it reads the new one
        for row in rows:
            run_tcl(["stop", "--grace", "1", row["run_id"]], env, work, timeout=120)
        assert {r["state"] for r in _ps(env, work)} == {"terminated"}
        # every run's runner goes with its task: the chips are free when the stop returns, the
        # runner's own exit goes on in the background (a quarter second; seconds on a loaded
        # CI machine, where a check at once found one still exiting). A bound, not a timing:
        # one that is never ended (a release that did not reach the shim) is still there.
        tasks = base / "state" / "tasks"
        runners = [p for p in _of(base) if str(tasks) in (p.info["cwd"] or "")]
        _, left = psutil.wait_procs(runners, timeout=60)
        assert left == [], (left, (base / "shim.log").read_text()[-4000:])
    finally:
        for row in _ps(env, work):
            if row["state"] not in FINAL:
                stop = ["stop", "--grace", "1", row["run_id"]]
                run_tcl(stop, env, work, check=False, timeout=120)
        _stop_all(base)
