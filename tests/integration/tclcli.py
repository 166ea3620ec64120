"""The real `tcl` command run as a user would: its own HOME, state dir and config.

The one harness of the integration tests for that: ``user_env`` builds the environment,
``run_tcl`` runs a command to its end, ``start_tcl`` starts one to talk to, and ``TclEnv``
binds them to a home, a config and the repo the commands run in.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from tests.polling import wait_until

TCL = str(Path(sys.executable).parent / "tcl")

# What a user of the local default has not set: no config file, no team database, and
# `tcl submit` handing its work to `tcl serve` (its default)
LOCAL_DEFAULT_DROP = ("TCL_CONFIG", "TCL_DB_URL", "TCL_SERVE")


def user_env(
    home: Path,
    config: Path | None = None,
    *,
    drop: Iterable[str] = LOCAL_DEFAULT_DROP,
    **extra: str,
) -> dict[str, str]:
    """This process's environment less ``drop``, with HOME at ``home``, tcl's state under
    ``home/state``, no colours, ``config`` as TCL_CONFIG when given, then ``extra``."""
    dropped = frozenset(drop)
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(HOME=str(home), TCL_STATE_DIR=str(home / "state"), NO_COLOR="1")
    if config is not None:
        env["TCL_CONFIG"] = str(config)
    env.update(extra)
    return env


def run_tcl(
    args: Sequence[str],
    env: Mapping[str, str],
    cwd: Path | None = None,
    *,
    check: bool = True,
    timeout: float = 180,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`tcl ARGS` to its end, its output captured as text; with ``check``, a non-zero exit
    fails the test with both outputs."""
    proc = subprocess.run(
        [TCL, *args],
        cwd=cwd,
        env=env,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        pytest.fail(f"tcl {shlex.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def start_tcl(
    args: Sequence[str],
    env: Mapping[str, str],
    cwd: Path | None = None,
    *,
    stderr: int | IO[Any] = subprocess.PIPE,
) -> subprocess.Popen[str]:
    """`tcl ARGS` started, not waited for: its stdout piped (and its stderr unless told), as
    text."""
    return subprocess.Popen(
        [TCL, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True
    )


def stop_tcl(proc: subprocess.Popen[str], timeout_s: float = 60.0) -> None:
    """SIGTERM a started `tcl` (a `tcl serve`) and wait for it; SIGKILLed if it outlives
    ``timeout_s``, which fails the test (a process left behind would load every later test:
    a daemon spinning at 60 % CPU slowed a whole CI run by a quarter)."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(
            f"{proc.args!r} did not stop within {timeout_s:g} s of SIGTERM"
        ) from None


@dataclass
class TclEnv:
    home: Path
    config: Path
    repo: Path  # where commands run (the shipped repo)

    def env(self) -> dict[str, str]:
        # drops nothing: a TCL_DB_URL or TCL_SERVE of the caller's reaches the command
        return user_env(self.home, self.config, drop=(), COLUMNS="200")

    def tcl(
        self, *args: str, check: bool = True, timeout: float = 180
    ) -> subprocess.CompletedProcess[str]:
        return run_tcl(args, self.env(), self.repo, check=check, timeout=timeout)

    def tcl_json(self, *args: str) -> Any:
        # --json is an option of the command: it goes before a `--` that starts a job's argv
        cut = args.index("--") if "--" in args else len(args)
        return json.loads(self.tcl(*args[:cut], "--json", *args[cut:]).stdout)

    def ps_row(self, run_id: str) -> dict[str, Any]:
        """The run's row of `tcl ps -a --json`."""
        rows: dict[str, dict[str, Any]] = {r["run_id"]: r for r in self.tcl_json("ps", "-a")}
        return rows[run_id]

    def wait_state(self, run_id: str, states: set[str], timeout_s: float) -> dict[str, Any]:
        """Wait until the run's owner (the `tcl serve` daemon's controller) has stored one of
        ``states``, then return the run's `tcl ps -a --json` row, which must agree. The looks
        read the store in this process: a `tcl ps` process per look costs most of a core for
        most of a second, on a CPU-bound suite."""
        wait_until(
            lambda: stored_state(self.env(), run_id),
            timeout_s,
            f"{run_id} {states}",
            done=lambda state: state in states,
        )
        row = self.ps_row(run_id)
        assert row["state"] in states, row
        return row

    def stored_log(self, run_id: str) -> str:
        """The run's log lines its owner kept so far, both streams (what `tcl logs RUN` prints
        of them), read in this process: for waits that look often (see :meth:`wait_state`)."""
        from tcl.control.logcache import LogCache
        from tcl.runner.api import EventKind

        cache = LogCache(run_id, Path(self.env()["TCL_STATE_DIR"]) / "logs")
        return "".join(e.data or "" for e in cache.read(kind=EventKind.LOG))


def _store_url(env: Mapping[str, str]) -> str:
    return env.get("TCL_DB_URL") or f"sqlite:///{Path(env['TCL_STATE_DIR']) / 'tcl.db'}"


def stored_matrix_status(env: Mapping[str, str], name: str) -> dict[str, Any]:
    """What `tcl matrix status NAME --json` prints, read from the store of ``env`` in this
    process (for waits that look often: see :meth:`TclEnv.wait_state`)."""
    from tcl.control.store import Store
    from tcl.control.sweep.progress import summary
    from tcl.control.sweep.queue import SweepQueue

    store = Store(_store_url(env))
    try:
        queue = SweepQueue(store)
        try:
            return dict(json.loads(json.dumps(summary(queue, name).to_json())))
        finally:
            queue.close()
    finally:
        store.close()


def stored_state(env: Mapping[str, str], run_id: str) -> str | None:
    """The run's state as the store of ``env`` (its TCL_DB_URL, else its state dir's SQLite
    file) holds it; None while there is no such run."""
    from tcl.control.errors import RunNotFoundError
    from tcl.control.store import Store

    store = Store(_store_url(env))
    try:
        return store.get_run(run_id).state.value
    except RunNotFoundError:
        return None
    finally:
        store.close()


def local_shim_client(state_dir: Path) -> httpx.Client:
    """A client of the local shim of tcl's state dir ``state_dir`` (its Unix socket, its
    token: read anew, a restarted shim has another)."""
    base = state_dir / "local-shim"
    token = (base / "token").read_text().strip()
    return httpx.Client(
        base_url="http://localhost/api",
        headers={"Authorization": f"Bearer {token}"},
        transport=httpx.HTTPTransport(uds=str(base / "shim.sock")),
        timeout=30,
    )


def stop_local_shim_and_tasks(base: Path) -> None:
    """Stop the local shim of ``base`` (a ``state/local-shim`` dir) and end what its tasks left
    running: their runners and jobs outlive the shim by design (a shim restart keeps them), so a
    test that only stops the shim leaves idle runners behind."""
    from tcl.control.localshim import stop_local_shim
    from tests.integration.shim.harness import cleanup_processes

    stop_local_shim(base)
    try:
        instance = (base / "state" / "instance_id").read_text().strip()
    except FileNotFoundError:
        return
    if instance:
        cleanup_processes(instance)
