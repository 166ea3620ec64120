"""Batch mode: the same runner driven from files instead of HTTP (SLURM, Volcano).

``status.json`` in the state dir always holds the latest state (versioned JSON, written
atomically); the event log sits next to it exactly as in serve mode. Stop signals (``scancel``,
preemption) are handled as in serve mode (``signals.py``): forwarded to the job, which gets the
grace period, and ``status.json`` ends ``terminated``.

A spec file with ``cluster_fs`` (a SLURM cluster with ``mount:``) has the cluster's root mounted
on this node before the job starts, shared with the node's other jobs (:mod:`.nodemount`); when
it cannot be, the job ends with one line naming the node and the fix, and nothing starts.
"""

from __future__ import annotations

import asyncio
import json
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from tcl.atomic import write_atomic
from tcl.common.api import ClusterFs
from tcl.runner.api import JobSpec, RunnerState
from tcl.runner.errors import InvalidSpec, RunnerError
from tcl.runner.service import Runner, RunnerConfig
from tcl.tokenfile import TOKEN_MIN_BITS, token_bits

if TYPE_CHECKING:
    from tcl.runner.nodemount import NodeMount
    from tcl.runner.signals import StopOnSignals

STATUS_FILE = "status.json"
STATUS_VERSION = 1


class StatusFile:
    """Keeps ``status.json`` equal to the runner's state (a state hook)."""

    def __init__(self, path: Path, run_id: str | None = None) -> None:
        self.path = path
        self.run_id = run_id

    def __call__(self, state: RunnerState, exit_code: int | None) -> None:
        body = {
            "version": STATUS_VERSION,
            "run_id": self.run_id,
            "state": state.value,
            "exit_code": exit_code,
            "updated_at": time.time(),
        }
        write_atomic(self.path, json.dumps(body).encode() + b"\n", mode=0o644)


TOKEN_KEY = "runner_token"  # beside the JobSpec's keys in a batch spec file; never sent on
PORT_FILE = "runner.port"  # in the state dir: where --serve listens (slurm.session reads it)
CLUSTER_FS_KEY = "cluster_fs"  # beside them too: what this node mounts (its password included)


@dataclass(frozen=True)
class SpecFile:
    spec: JobSpec
    token: str | None  # the bearer token of ``--serve``
    cluster_fs: ClusterFs | None = None  # the cluster's root, mounted before the job starts


def load_spec(path: Path) -> SpecFile:
    """The JobSpec in ``path`` and, under ``runner_token``, the token ``--serve`` requires;
    under ``cluster_fs``, the filesystem to mount first.

    A file holding a token, secrets or a password must be mode 0600 (the scheduler's spool is
    shared)."""
    try:
        raw = json.loads(path.read_bytes())
        if not isinstance(raw, dict):
            raise InvalidSpec("spec", f"{path}: a JSON object is expected")
        token = raw.pop(TOKEN_KEY, None)
        if token is not None and (not isinstance(token, str) or token_bits(token) < TOKEN_MIN_BITS):
            raise InvalidSpec(TOKEN_KEY, f"{path}: {TOKEN_KEY} must be a random token string")
        fs_raw = raw.pop(CLUSTER_FS_KEY, None)
        fs = None if fs_raw is None else ClusterFs.model_validate(fs_raw)
        spec = JobSpec.model_validate(raw)
    except ValueError as e:
        if isinstance(e, ValidationError):
            first = e.errors()[0]
            loc = [CLUSTER_FS_KEY] if e.title == ClusterFs.__name__ else []
            field = ".".join(str(p) for p in [*loc, *first["loc"]])
            raise InvalidSpec(field, f"{path}: {field}: {first['msg']}") from e
        raise InvalidSpec("spec", f"{path}: not JSON: {e}") from e
    mode = stat.S_IMODE(path.stat().st_mode)
    password = fs is not None and fs.meta_password is not None
    if (token is not None or spec.secrets or password) and mode & 0o077:
        raise InvalidSpec(
            TOKEN_KEY if token is not None else "secrets" if spec.secrets else CLUSTER_FS_KEY,
            f"{path}: mode {mode:04o} lets other users read its token, secrets or password; "
            "chmod 600",
        )
    return SpecFile(spec, token, fs)


def run_batch(
    config: RunnerConfig,
    spec_path: Path,
    code_path: Path | None,
    serve: tuple[str, int] | None = None,
    linger_s: float = 0.0,
) -> int:
    """Run one job to the end; returns its exit code (1 when it never started, 143 when a
    signal ended the run)."""
    loaded = load_spec(spec_path)
    spec = loaded.spec
    if serve is not None and loaded.token is None:
        raise InvalidSpec(TOKEN_KEY, f"{spec_path}: --serve needs {TOKEN_KEY} in the spec file")
    mount = None
    if loaded.cluster_fs is not None:
        from tcl.runner.nodemount import NodeMount, job_key, node_state_dir

        mount = NodeMount(loaded.cluster_fs, node_state_dir(), job_key())
    runner = Runner(config)
    status = StatusFile(config.state_dir / STATUS_FILE, spec.run_id)
    runner.add_state_hook(status)
    status(runner.state, None)
    try:
        token = loaded.token if serve is not None else None
        return asyncio.run(_main(runner, spec, code_path, serve, token, linger_s, mount))
    finally:
        runner.close()


async def _main(
    runner: Runner,
    spec: JobSpec,
    code_path: Path | None,
    serve: tuple[str, int] | None,
    token: str | None,
    linger_s: float,
    mount: NodeMount | None = None,
) -> int:
    from tcl.runner.signals import StopOnSignals

    async with StopOnSignals(runner, runner.config.stop_grace_s) as stopper:
        drive = _Drive(runner, spec, code_path, stopper, mount)
        if serve is None:
            await drive.until_final()
        else:
            assert token is not None
            await drive.serving(serve, token, linger_s)
    return stopper.exit_status(default=1)


@dataclass
class _Drive:
    """One batch run: its job started from the spec (and code), the node's mount released once
    the job's processes ended (or it never started)."""

    runner: Runner
    spec: JobSpec
    code_path: Path | None
    stopper: StopOnSignals
    mount: NodeMount | None

    async def until_final(self) -> None:
        try:
            await self.launch()
            await self.runner.finished()
        finally:
            await self.release()

    async def serving(self, serve: tuple[str, int], token: str, linger_s: float) -> None:
        """The job, and the runner's server for the control plane until the job ends and
        ``linger_s`` after (followers read the last events)."""
        from tcl.runner.server import Server

        runner = self.runner
        try:
            # The job starts first: building the server (uvicorn and the app: 0.1-0.3 s of
            # imports on a busy node) is not on the way of its first line, which the event log
            # carries.
            await self.launch()
            # the bound port (a port 0 was asked for: any free one), for the control plane
            try:
                server = Server(
                    runner, *serve, token, port_file=runner.config.state_dir / PORT_FILE
                )
            except BaseException:  # it cannot listen: the job it started must not outlive it
                await asyncio.to_thread(runner.stop, 0.0)
                await runner.finished()
                raise
            task = asyncio.create_task(server.serve())
            try:
                await server.started()
                await runner.finished()
                await self.release()  # after the job's processes ended, before the linger
                if self.stopper.received is None:
                    await asyncio.sleep(linger_s)
            finally:
                server.shutdown()
                await task
        finally:
            await self.release()  # the job never started, or ended with an error

    async def launch(self) -> None:
        """The job started (returns once its process runs)."""
        try:
            await asyncio.to_thread(_drive, self.runner, self.spec, self.code_path, self.mount)
        except RunnerError:
            # A signal that came while the job was being set up terminated the run, so the
            # next step was refused: that is the run's outcome, not a bad input.
            if self.stopper.received is None:
                raise

    async def release(self) -> None:
        """The node's mount released, once."""
        mount, self.mount = self.mount, None
        if mount is not None:
            await asyncio.to_thread(mount.release)


def _drive(runner: Runner, spec: JobSpec, code_path: Path | None, mount: NodeMount | None) -> None:
    try:
        runner.submit(spec)
        if spec.code is not None:
            if code_path is None:
                raise InvalidSpec("code", "the spec names code but no --code tarball was given")
            runner.use_code_file(code_path)
        if mount is not None and not _mount(runner, mount):
            return
        runner.run()
    except RunnerError as e:
        runner.say(f"batch: {e.detail}")
        if not runner.state.is_final:
            runner.stop(0)
        raise


def _mount(runner: Runner, mount: NodeMount) -> bool:
    """The cluster's root on this node before the job starts; when it cannot be mounted the job
    fails to start with one line naming the node and the fix (also on stderr: SLURM's output)."""
    from tcl.common.errors import MountFailed
    from tcl.runner.nodemount import node_name

    try:
        mount.acquire()
    except (MountFailed, OSError) as e:
        detail = e.detail if isinstance(e, MountFailed) else str(e)
        line = f"batch: node {node_name()}: {detail}"
        print(f"tcl-runner: {line}", file=sys.stderr, flush=True)
        runner.fail_to_start(line)
        return False
    return True
