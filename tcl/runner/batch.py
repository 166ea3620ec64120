"""Batch mode: the same runner driven from files instead of HTTP (SLURM, Volcano).

``status.json`` in the state dir always holds the latest state (versioned JSON, written
atomically); the event log sits next to it exactly as in serve mode. Stop signals (``scancel``,
preemption) are handled as in serve mode (``signals.py``): forwarded to the job, which gets the
grace period, and ``status.json`` ends ``terminated``.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from tcl.atomic import write_atomic
from tcl.runner.api import JobSpec, RunnerState
from tcl.runner.errors import InvalidSpec, RunnerError
from tcl.runner.service import Runner, RunnerConfig

if TYPE_CHECKING:
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


def load_spec(path: Path) -> JobSpec:
    try:
        return JobSpec.model_validate_json(path.read_bytes())
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise InvalidSpec(field, f"{path}: {field}: {first['msg']}") from e


def run_batch(
    config: RunnerConfig,
    spec_path: Path,
    code_path: Path | None,
    serve: tuple[str, int] | None = None,
    linger_s: float = 0.0,
) -> int:
    """Run one job to the end; returns its exit code (1 when it never started, 143 when a
    signal ended the run)."""
    spec = load_spec(spec_path)
    runner = Runner(config)
    status = StatusFile(config.state_dir / STATUS_FILE, spec.run_id)
    runner.add_state_hook(status)
    status(runner.state, None)
    try:
        return asyncio.run(_main(runner, spec, code_path, serve, linger_s))
    finally:
        runner.close()


async def _main(
    runner: Runner,
    spec: JobSpec,
    code_path: Path | None,
    serve: tuple[str, int] | None,
    linger_s: float,
) -> int:
    from tcl.runner.signals import StopOnSignals

    async with StopOnSignals(runner, runner.config.stop_grace_s) as stopper:
        if serve is None:
            await _drive_until_final(runner, spec, code_path, stopper)
        else:
            await _drive_serving(runner, spec, code_path, serve, linger_s, stopper)
    return stopper.exit_status(default=1)


async def _drive_until_final(
    runner: Runner, spec: JobSpec, code_path: Path | None, stopper: StopOnSignals
) -> None:
    try:
        await asyncio.to_thread(_drive, runner, spec, code_path)
    except RunnerError:
        # A signal that came while the job was being set up terminated the run, so the next
        # step was refused: that is the run's outcome, not a bad input.
        if stopper.received is None:
            raise
    await runner.finished()


def _drive(runner: Runner, spec: JobSpec, code_path: Path | None) -> None:
    try:
        runner.submit(spec)
        if spec.code is not None:
            if code_path is None:
                raise InvalidSpec("code", "the spec names code but no --code tarball was given")
            runner.use_code_file(code_path)
        runner.run()
    except RunnerError as e:
        runner.say(f"batch: {e.detail}")
        if not runner.state.is_final:
            runner.stop(0)
        raise


async def _drive_serving(
    runner: Runner,
    spec: JobSpec,
    code_path: Path | None,
    serve: tuple[str, int],
    linger_s: float,
    stopper: StopOnSignals,
) -> None:
    from tcl.runner.server import Server

    server = Server(runner, *serve)
    task = asyncio.create_task(server.serve())
    try:
        await server.started()
        await _drive_until_final(runner, spec, code_path, stopper)
        if stopper.received is None:
            await asyncio.sleep(linger_s)  # let followers read the last events
    finally:
        server.shutdown()
        await task
