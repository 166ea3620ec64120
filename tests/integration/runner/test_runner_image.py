"""The runner image on real dockerd: logs over WebSocket with resume, stop, ssh."""

from __future__ import annotations

import asyncio
import hashlib
import io
import tarfile
import time
from collections.abc import AsyncGenerator

from tcl.runner.api import CodeRef, Event, EventKind, JobSpec, LogStream, RunnerState
from tcl.runner.client import RunnerClient

from .conftest import RunnerContainer

S = RunnerState
N_LINES = 10_000
# Prints N numbered lines to stdout and to stderr, pausing now and then so the follower
# really is following a live job when it disconnects.
PRINTER = f"""\
import sys, time
for i in range({N_LINES}):
    print(f"out {{i}}")
    print(f"err {{i}}", file=sys.stderr)
    if i % 500 == 499:
        time.sleep(0.05)
"""


def tarball(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def check_lines(events: list[Event]) -> None:
    """Every line exactly once, in order, per stream; seqs strictly increasing, no gaps."""
    seqs = [e.seq for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "gap or duplicate in seq"
    text = {LogStream.STDOUT: "", LogStream.STDERR: ""}
    for e in events:
        if e.kind is EventKind.LOG and e.stream in text:
            text[e.stream] += e.data or ""
    assert text[LogStream.STDOUT].splitlines() == [f"out {i}" for i in range(N_LINES)]
    assert text[LogStream.STDERR].splitlines() == [f"err {i}" for i in range(N_LINES)]
    assert events[-1].state is S.SUCCEEDED and events[-1].exit_code == 0


async def start_printer(client: RunnerClient) -> None:
    code = tarball({"printer.py": PRINTER.encode()})
    digest = hashlib.sha256(code).hexdigest()
    spec = JobSpec(
        run_id="lines", argv=["python3", "printer.py"], code=CodeRef(sha256=digest, size=len(code))
    )
    assert (await client.submit(spec)).state is S.WAITING_CODE
    assert (await client.upload_code(code, digest)).state is S.READY
    assert (await client.run()).state is S.RUNNING


async def test_ten_thousand_lines_over_websocket_with_resume(
    runner_container: RunnerContainer,
) -> None:
    async with RunnerClient(runner_container.url, runner_container.token) as client:
        await start_printer(client)

        async def follow_all() -> list[Event]:
            return [e async for e in client.follow(0)]

        whole = asyncio.create_task(follow_all())
        # A second follower drops its connection mid-stream and resumes from its last seq.
        first: list[Event] = []
        stdout_lines = 0
        stream = client.follow(0)
        assert isinstance(stream, AsyncGenerator)  # follow is an async generator function
        async for e in stream:
            first.append(e)
            if e.stream is LogStream.STDOUT:
                stdout_lines += (e.data or "").count("\n")
            if stdout_lines >= N_LINES // 3:
                break
        await stream.aclose()  # closes the WebSocket
        assert not first[-1].state, "disconnected after the end: nothing was tested"
        rest = [e async for e in client.follow(first[-1].seq)]
        assert rest and rest[0].seq == first[-1].seq + 1
        check_lines(first + rest)
        check_lines((await asyncio.wait_for(whole, 60))[4:])  # after the 4 set-up states
        # Long polling serves the very same events.
        polled = [e async for e in client.poll(first[-1].seq)]
        assert polled == rest


async def test_stop_a_job_that_ignores_sigterm(runner_container: RunnerContainer) -> None:
    async with RunnerClient(runner_container.url, runner_container.token) as client:
        script = "trap '' TERM; echo ready; sleep 600"
        await client.submit(JobSpec(run_id="stubborn", argv=["sh", "-c", script]))
        await client.run()
        async for e in client.follow(0):
            if e.data == "ready\n":
                break
        t0 = time.monotonic()
        assert (await client.stop(grace_s=1.0)).state is S.RUNNING
        events = [e async for e in client.follow(0)]
        elapsed = time.monotonic() - t0
    assert 1.0 <= elapsed < 15
    final = events[-1]
    assert (final.state, final.exit_code) == (S.TERMINATED, 137)
    runner_lines = [e.data or "" for e in events if e.stream is LogStream.RUNNER]
    assert any("SIGKILL" in line for line in runner_lines)
    kill_line = next(i for i, e in enumerate(events) if "SIGKILL to" in (e.data or ""))
    assert kill_line < len(events) - 1  # logged before the terminal state


async def test_ssh_lands_in_the_job_with_its_env_not_its_secrets(
    runner_container: RunnerContainer,
) -> None:
    async with RunnerClient(runner_container.url, runner_container.token) as client:
        spec = JobSpec(
            run_id="sshable",
            argv=["sleep", "600"],
            env={"FOO": "bar baz"},
            secrets={"API_TOKEN": "s3cr3t-value"},
            working_dir="/srv/job",
        )
        await client.submit(spec)
        await client.run()
        ok = await asyncio.to_thread(
            runner_container.ssh, 'pwd; echo "$FOO|$TCL_RUN_ID|${API_TOKEN:-absent}"'
        )
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout.splitlines() == ["/srv/job", "bar baz|sshable|absent"]
        leaked = await asyncio.to_thread(
            runner_container.ssh, "grep -rl s3cr3t-value /run /etc /srv /var/lib /root || true"
        )
        assert leaked.stdout.strip() == ""
        refused = await asyncio.to_thread(runner_container.ssh, "true", runner_container.wrong_key)
        assert refused.returncode == 255 and "Permission denied" in refused.stderr
        await client.stop(0)
