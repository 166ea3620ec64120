"""A runner that dies before it ever answered fails its launch at once, with its host's reason
(CI41: the sweep placer waited the runner's 150 s timeout on a task the shim had ended
``vanished`` 1.3 s after its start, and the entry sat ``claimed`` all that while)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from tcl.control.backends import shimlaunch
from tcl.control.errors import AgentError
from tcl.control.transport.httpagents import HttpRunner


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_runner_whose_task_ended_fails_the_wait_with_the_host_s_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shimlaunch, "TASK_CHECK_S", 0.05)
    runner = HttpRunner(f"http://127.0.0.1:{_closed_port()}", "token")  # nobody answers
    asked: list[int] = []

    async def ended() -> str | None:
        asked.append(1)
        return None if len(asked) < 3 else "task t on h ended before its runner answered: vanished"

    try:
        with pytest.raises(AgentError, match="ended before its runner answered: vanished"):
            await asyncio.wait_for(shimlaunch.wait_runner(runner, ended), 30)
    finally:
        await runner.aclose()
    assert len(asked) == 3  # asked while the task ran on, then told it ended


async def test_a_runner_that_answers_is_not_asked_about(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check costs a started runner nothing: its first answer ends the wait."""

    class Answers:
        async def healthcheck(self) -> dict[str, str]:
            return {"state": "idle"}

    async def ended() -> str | None:
        raise AssertionError("asked about a runner that answered")

    await shimlaunch.wait_runner(Answers(), ended)  # type: ignore[arg-type]
