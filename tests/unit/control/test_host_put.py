"""The ``ssh`` backend's code hand-over script (``ssh_scripts/host_put.py``) against a real
runner served over loopback HTTP: run as the backend sends it (``python -c TEXT TARBALL
SHA256``, ``PORT TOKEN`` on stdin), with the standard library only (``-I -S``: no tcl)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from tcl.control.backends import ssh
from tcl.control.backends.ssh_scripts import host_put
from tcl.runner.api import CodeRef, JobSpec
from tcl.runner.api import RunnerState as S
from tcl.runner.app import ROUTES
from tcl.runner.codecache import CodeCache
from tcl.runner.server import Server
from tcl.runner.service import Runner, RunnerConfig
from tests.unit.runner.conftest import TOKEN, sha, tarball

FILES = {"pkg/main.py": b"print('shipped')\n"}
OLD_MTIME = 1_000_000_000.0

Serve = Callable[..., AbstractAsyncContextManager[tuple[Runner, int]]]


@pytest.fixture
def serve(tmp_path: Path) -> Serve:
    """A real runner on a loopback port, its job's spec in (waiting for the code ``sha256``
    names); its host's tree cache at ``cache``, if given."""

    @asynccontextmanager
    async def go(sha256: str, cache: Path | None = None) -> AsyncIterator[tuple[Runner, int]]:
        runner = Runner(RunnerConfig(state_dir=tmp_path / "state", code_cache_dir=cache))
        code = CodeRef(sha256=sha256, size=len(tarball(FILES)))
        assert runner.submit(JobSpec(run_id="r", argv=["true"], code=code)) is S.WAITING_CODE
        server = Server(runner, "127.0.0.1", 0, TOKEN)
        serving = asyncio.create_task(server.serve())
        try:
            await asyncio.wait_for(server.started(), 30)
            yield runner, server.port
        finally:
            server.shutdown()
            await serving
            runner.stop(0)
            runner.wait(10)
            runner.close()

    return go


async def hand_over(path: Path, sha256: str, stdin: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *[sys.executable, "-I", "-S", "-c", ssh._HOST_PUT, str(path), sha256],
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(stdin.encode()), 60)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


def cached_tarball(tmp_path: Path) -> tuple[Path, str]:
    """The host's cached tarball, as ``<shim_dir>/code/<sha256>.tar.gz``, last used long ago."""
    data = tarball(FILES)
    path = tmp_path / "code" / f"{sha(data)}.tar.gz"
    path.parent.mkdir()
    path.write_bytes(data)
    os.utime(path, (OLD_MTIME, OLD_MTIME))
    return path, sha(data)


def test_the_backend_sends_the_scripts_file() -> None:
    assert Path(host_put.__file__).read_text() == ssh._HOST_PUT


def test_the_scripts_paths_are_the_runners_routes() -> None:
    routes = {(r.method, r.path) for r in ROUTES}
    assert ("PUT", host_put.CODE_PATH) in routes
    assert ("POST", host_put.CACHED_CODE_PATH) in routes


async def test_code_not_in_the_tree_cache_is_streamed_from_the_tarball(
    serve: Serve, tmp_path: Path
) -> None:
    path, sha256 = cached_tarball(tmp_path)
    async with serve(sha256) as (runner, port):  # no tree cache: /api/code/cached is a 404
        assert await hand_over(path, sha256, f"{port} {TOKEN}\n") == (0, "")
        assert runner.state is S.READY
        assert (runner.workdir / "pkg/main.py").read_bytes() == FILES["pkg/main.py"]
    assert path.stat().st_mtime > OLD_MTIME  # used now: evicted last


async def test_code_in_the_tree_cache_needs_no_tarball(serve: Serve, tmp_path: Path) -> None:
    path, sha256 = cached_tarball(tmp_path)
    CodeCache(tmp_path / "trees").add(sha256, path, 10**6)
    path.unlink()  # only the extracted tree is left: nothing to upload
    async with serve(sha256, cache=tmp_path / "trees") as (runner, port):
        assert await hand_over(path, sha256, f"{port} {TOKEN}\n") == (0, "")
        assert runner.state is S.READY
        assert (runner.workdir / "pkg/main.py").read_bytes() == FILES["pkg/main.py"]


async def test_no_tarball_and_no_tree_exits_3(serve: Serve, tmp_path: Path) -> None:
    async with serve("a" * 64) as (runner, port):
        code, _ = await hand_over(tmp_path / "gone.tar.gz", "a" * 64, f"{port} {TOKEN}\n")
        assert code == host_put.NO_TARBALL == 3
        assert runner.state is S.WAITING_CODE
        assert not (runner.workdir / "pkg").exists()


async def test_no_port_exits_4(tmp_path: Path) -> None:
    path, sha256 = cached_tarball(tmp_path)
    assert await hand_over(path, sha256, "") == (host_put.NO_PORT, "")
    assert host_put.NO_PORT == 4


async def test_a_refusal_is_one_line_naming_the_status(serve: Serve, tmp_path: Path) -> None:
    path, sha256 = cached_tarball(tmp_path)
    async with serve(sha256) as (_, port):
        code, err = await hand_over(path, sha256, f"{port} wrong-token\n")
    assert code == 1 and err.startswith("runner refused the cached code: 401")
