"""``HttpRunner.upload_code`` asks the runner for its host's cached tree before uploading; a
runner that refuses the task's token reads as not there.

Real runners (``tcl.runner``) sharing one code cache, reached in-process through httpx's ASGI
transport instead of a socket."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tcl.control.errors import AgentUnreachableError
from tcl.control.transport.httpagents import HttpRunner
from tcl.runner.api import CodeRef, JobSpec, RunnerState
from tcl.runner.app import create_app
from tcl.runner.client import RunnerClient
from tcl.runner.service import Runner, RunnerConfig
from tests.unit.runner.conftest import TOKEN, sha, tarball


async def test_second_runner_gets_the_code_without_reading_the_tarball(tmp_path: Path) -> None:
    code = tarball({"main.py": b"print(1)\n"})
    archive = tmp_path / "code.tar.gz"
    archive.write_bytes(code)
    spec = JobSpec(run_id="r", argv=["true"], code=CodeRef(sha256=sha(code), size=len(code)))
    runners = []
    for name, path in (("one", archive), ("two", tmp_path / "gone.tar.gz")):
        runner = Runner(RunnerConfig(state_dir=tmp_path / name, code_cache_dir=tmp_path / "cache"))
        runners.append(runner)
        agent = HttpRunner("http://runner", TOKEN, name=name)
        agent._client = RunnerClient(  # the real client, over an in-process transport
            "http://runner", TOKEN, transport=httpx.ASGITransport(app=create_app(runner, TOKEN))
        )
        await agent.submit(spec)
        # "two" is handed a path that does not exist: only the cache can satisfy it.
        await agent.upload_code(path, sha(code))
        assert runner.state is RunnerState.READY
        assert (runner.workdir / "main.py").read_bytes() == b"print(1)\n"
        await agent._client.aclose()
    for runner in runners:
        runner.close()


async def test_another_runner_at_the_port_reads_as_not_there(tmp_path: Path) -> None:
    """A runner that refuses the token the shim just handed over is another task's (ours
    ended and its port was reused, or never bound it): the caller looks again rather than
    failing the run on a 401."""
    runner = Runner(RunnerConfig(state_dir=tmp_path / "other", code_cache_dir=tmp_path / "c"))
    agent = HttpRunner("http://runner", "not-" + TOKEN, name="runner r@h")
    agent._client = RunnerClient(
        "http://runner",
        "not-" + TOKEN,
        transport=httpx.ASGITransport(app=create_app(runner, TOKEN)),
    )
    try:
        with pytest.raises(AgentUnreachableError, match="another runner answers at its port"):
            await agent.events(after=0)
    finally:
        await agent._client.aclose()
        runner.close()
