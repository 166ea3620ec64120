"""A real runner app (real processes, real files) reached in-process through httpx's ASGI
transport: no sockets needed for unit tests."""

from __future__ import annotations

import hashlib
import io
import sys
import tarfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tcl.runner.app import create_app
from tcl.runner.client import RunnerClient
from tcl.runner.service import Runner, RunnerConfig

PY = sys.executable
# The bearer token of the in-process runner apps (any 256-bit token will do).
TOKEN = "t" * 43


def tarball(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Runner]:
    r = Runner(
        RunnerConfig(
            state_dir=tmp_path / "state",
            max_code_bytes=64 * 1024,
            ssh_env_file=tmp_path / "ssh" / "job-env.sh",
        )
    )
    yield r
    r.stop(0)
    r.wait(10)
    r.close()


@pytest.fixture
async def client(runner: Runner) -> AsyncIterator[RunnerClient]:
    transport = httpx.ASGITransport(app=create_app(runner, TOKEN))
    async with RunnerClient("http://runner", TOKEN, transport=transport) as c:
        yield c
