"""stdout and stderr keep the order the job wrote them in the runner's one event sequence.

The jobs below write to one stream, then wait until the runner has read it (the pipe is empty:
``FIONREAD``) before writing to the other, so the order written is also the order the bytes
were available to the runner: any other order in the log is the runner's doing."""

from __future__ import annotations

from pathlib import Path

from tcl.runner.api import CodeRef, EventKind, JobSpec, LogStream
from tcl.runner.client import RunnerClient

from .conftest import PY, sha, tarball

DRAINED = """
import fcntl, struct, sys, termios

def drained(stream):
    stream.flush()
    while struct.unpack("i", fcntl.ioctl(stream.fileno(), termios.FIONREAD, b"0000"))[0]:
        pass

def say(stream, text):
    stream.write(text)
    drained(stream)
"""


async def _run(client: RunnerClient, body: str) -> list[tuple[LogStream, str]]:
    """The job's output events, in seq order: (stream, text)."""
    code = tarball({"main.py": (DRAINED + body).encode()})
    spec = JobSpec(
        run_id="order", argv=[PY, "main.py"], code=CodeRef(sha256=sha(code), size=len(code))
    )
    await client.submit(spec)
    await client.upload_code(code, sha(code))
    await client.run()
    events: list[tuple[LogStream, str]] = []
    async for e in client.poll(0, wait_s=5):
        if e.kind is EventKind.LOG and e.stream in (LogStream.STDOUT, LogStream.STDERR):
            assert e.data is not None
            events.append((e.stream, e.data))
    return events


def _lines(events: list[tuple[LogStream, str]]) -> list[str]:
    return [f"{stream.value}:{line}" for stream, text in events for line in text.splitlines()]


async def test_alternating_streams_keep_the_order_written(client: RunnerClient) -> None:
    n = 300
    body = f"""
for i in range({n}):
    say(sys.stdout, f"out {{i}}\\n")
    say(sys.stderr, f"err {{i}}\\n")
"""
    lines = _lines(await _run(client, body))
    expected = [f"{s}:{w} {i}" for i in range(n) for s, w in (("stdout", "out"), ("stderr", "err"))]
    assert lines == expected


async def test_an_unfinished_line_keeps_its_place_before_the_other_streams_line(
    client: RunnerClient, tmp_path: Path
) -> None:
    body = """
say(sys.stdout, "loading... ")
say(sys.stderr, "warning: slow disk\\n")
say(sys.stdout, "done\\n")
"""
    events = await _run(client, body)
    assert events == [
        (LogStream.STDOUT, "loading... "),
        (LogStream.STDERR, "warning: slow disk\n"),
        (LogStream.STDOUT, "done\n"),
    ]
