"""Fixtures: real shims (subprocesses) that are killed and cleaned up after each test."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from tests.integration.shim.harness import Shim, cleanup_processes

ShimFactory = Callable[..., Awaitable[Shim]]


@pytest.fixture
async def make_shim(tmp_path: Path, docker_client: Any) -> AsyncIterator[ShimFactory]:
    shims: list[Shim] = []

    async def make(
        *args: str, state: str = "shim", env: dict[str, str] | None = None, port: int | None = None
    ) -> Shim:
        state_dir = tmp_path / state
        shim = Shim(state_dir=state_dir, args=list(args), env=env or {})
        if port is not None:
            shim.port = port
        shims.append(shim)
        await shim.start()
        return shim

    yield make
    for shim in shims:
        shim.kill()
    for inst in {s.instance for s in shims if (s.state_dir / "instance_id").exists()}:
        for c in docker_client.containers.list(
            all=True, filters={"label": f"tcl.shim.instance={inst}"}
        ):
            with contextlib.suppress(docker.errors.APIError):
                c.remove(force=True)
        cleanup_processes(inst)
