"""The HTTP API on a real runner: bad input, the happy path, secrets, stop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tcl.runner.api import CodeRef, EventKind, JobSpec, LogStream, RunnerState
from tcl.runner.client import RunnerAPIError, RunnerClient
from tcl.runner.service import Runner

from .conftest import PY, sha, tarball

S = RunnerState


async def collect(
    client: RunnerClient,
) -> tuple[dict[LogStream, str], list[RunnerState], int | None]:
    text: dict[LogStream, str] = {s: "" for s in LogStream}
    states: list[RunnerState] = []
    exit_code = None
    async for e in client.poll(0, wait_s=5):
        if e.kind is EventKind.LOG:
            assert e.stream is not None and e.data is not None
            text[e.stream] += e.data
        elif e.kind is EventKind.STATE:
            assert e.state is not None
            states.append(e.state)
            exit_code = e.exit_code
    return text, states, exit_code


async def test_malformed_spec_is_422_naming_the_field(client: RunnerClient) -> None:
    http = client._http
    r = await http.post("/api/submit", json={"run_id": "ok", "argv": "not-a-list"})
    assert r.status_code == 422
    assert r.json()["error"] == "invalid_spec"
    assert [d["field"] for d in r.json()["detail"]] == ["argv"]
    r = await http.post("/api/submit", json={"run_id": "ok", "argv": ["x"], "bogus": 1})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "bogus"
    with pytest.raises(RunnerAPIError) as e:  # valid JSON, but nothing to run
        await client.submit(JobSpec(run_id="r"))
    assert e.value.status == 422 and e.value.error == "invalid_spec"
    assert isinstance(e.value.detail, list) and e.value.detail[0]["field"] == "argv"


async def test_second_different_spec_is_409_same_spec_is_fine(client: RunnerClient) -> None:
    spec = JobSpec(run_id="r1", argv=["true"])
    assert (await client.submit(spec)).state is S.READY
    assert (await client.submit(spec)).state is S.READY
    with pytest.raises(RunnerAPIError) as e:
        await client.submit(JobSpec(run_id="r2", argv=["true"]))
    assert (e.value.status, e.value.error) == (409, "spec_conflict")


async def test_run_before_code_is_409(client: RunnerClient) -> None:
    with pytest.raises(RunnerAPIError) as e:
        await client.run()
    assert e.value.status == 409
    code = tarball({"a.py": b""})
    await client.submit(
        JobSpec(run_id="r", argv=["true"], code=CodeRef(sha256=sha(code), size=len(code)))
    )
    with pytest.raises(RunnerAPIError) as e:
        await client.run()
    assert (e.value.status, e.value.error) == (409, "illegal_state")


async def test_hash_mismatch_is_400_and_nothing_extracted(
    client: RunnerClient, runner: Runner
) -> None:
    code = tarball({"a.py": b"print(1)"})
    await client.submit(
        JobSpec(run_id="r", argv=["true"], code=CodeRef(sha256=sha(code), size=len(code)))
    )
    with pytest.raises(RunnerAPIError) as e:  # header matches the spec, body does not
        await client.upload_code(code + b"tampered", sha(code))
    assert (e.value.status, e.value.error) == (400, "code_hash_mismatch")
    with pytest.raises(RunnerAPIError) as e:  # header is not the spec's hash
        await client.upload_code(code, "0" * 64)
    assert e.value.status == 400
    r = await client._http.put("/api/code", content=code)  # no header at all
    assert r.status_code == 400
    assert not runner.workdir.exists() and runner.state is S.WAITING_CODE
    assert (await client.upload_code(code, sha(code))).state is S.READY
    assert (runner.workdir / "a.py").read_bytes() == b"print(1)"


async def test_escaping_tarball_is_422_and_nothing_written(
    client: RunnerClient, runner: Runner, tmp_path: Path
) -> None:
    code = tarball({"ok.txt": b"1", "../../outside.txt": b"2"})
    await client.submit(
        JobSpec(run_id="r", argv=["true"], code=CodeRef(sha256=sha(code), size=len(code)))
    )
    with pytest.raises(RunnerAPIError) as e:
        await client.upload_code(code, sha(code))
    assert (e.value.status, e.value.error) == (422, "unsafe_archive")
    assert not runner.workdir.exists()
    assert not list(tmp_path.rglob("outside.txt"))
    assert runner.state is S.WAITING_CODE


async def test_body_over_the_limit_is_413(client: RunnerClient) -> None:
    big = b"\0" * (65 * 1024)
    await client.submit(
        JobSpec(run_id="r", argv=["true"], code=CodeRef(sha256=sha(big), size=len(big)))
    )
    with pytest.raises(RunnerAPIError) as e:
        await client.upload_code(big, sha(big))
    assert e.value.status == 413

    async def streamed() -> AsyncIterator[bytes]:
        yield big  # no Content-Length: the limit is enforced while streaming

    r = await client._http.put("/api/code", content=streamed(), headers={"X-Code-Sha256": sha(big)})
    assert r.status_code == 413
    r = await client._http.post(
        "/api/submit",
        content=b"[" + b"1," * 600_000 + b"1]",
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 413


async def test_job_runs_output_is_masked_and_env_is_set(
    client: RunnerClient, tmp_path: Path
) -> None:
    script = (
        "import os, sys\n"
        "print('cwd', os.getcwd())\n"
        "print('foo', os.environ['FOO'], os.environ['TCL_RUN_ID'])\n"
        "sys.stdout.write('tok=' + os.environ['TOK'][:3]); sys.stdout.flush()\n"
        "import time; time.sleep(0.2)  # two separate reads of the pipe\n"
        "sys.stdout.write(os.environ['TOK'][3:] + '\\n')\n"
        "print('err', os.environ['TOK'], file=sys.stderr)\n"
        "sys.exit(3)\n"
    )
    code = tarball({"main.py": script.encode()})
    spec = JobSpec(
        run_id="r9",
        argv=[PY, "main.py"],
        env={"FOO": "bar"},
        secrets={"TOK": "hunter2"},
        code=CodeRef(sha256=sha(code), size=len(code)),
    )
    await client.submit(spec)
    await client.upload_code(code, sha(code))
    assert (await client.run()).state is S.RUNNING
    text, states, exit_code = await collect(client)
    assert states == [S.WAITING_SPEC, S.WAITING_CODE, S.READY, S.RUNNING, S.FAILED]
    assert exit_code == 3
    workdir = tmp_path / "state" / "work"
    assert text[LogStream.STDOUT] == f"cwd {workdir}\nfoo bar r9\ntok=***\n"
    assert text[LogStream.STDERR] == "err ***\n"
    snippet = (tmp_path / "ssh" / "job-env.sh").read_text()
    assert "export FOO=bar" in snippet and f"cd {workdir}" in snippet and "hunter2" not in snippet
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert b"hunter2" not in path.read_bytes(), path


async def test_stop_a_job_that_ignores_sigterm(client: RunnerClient) -> None:
    prog = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        "print('ready', flush=True); time.sleep(60)"
    )
    await client.submit(JobSpec(run_id="r", argv=[PY, "-c", prog]))
    await client.run()
    page = await client.events(0, wait_s=0)
    while not any(e.data == "ready\n" for e in page.events):
        page = await client.events(0, wait_s=1)
    t0 = time.monotonic()
    await client.stop(grace_s=0.5)
    _, states, exit_code = await collect(client)
    assert time.monotonic() - t0 >= 0.5
    assert states[-1] is S.TERMINATED and exit_code == 128 + 9


async def test_a_stop_that_dumps_stacks_leaves_them_in_the_log(client: RunnerClient) -> None:
    """What the controller asks of a hung node's peers: SIGABRT, so Python dumps its threads'
    stacks into the job's log (PYTHONFAULTHANDLER, set for every job that can be judged hung),
    then the job ends terminated (stopped, not failed)."""
    prog = "import time\ndef waiting_in_a_collective():\n    time.sleep(60)\n"
    prog += "print('ready', flush=True)\nwaiting_in_a_collective()\n"
    await client.submit(JobSpec(run_id="r", argv=[PY, "-c", prog]))
    await client.run()
    async for e in client.poll(0, wait_s=1):
        if e.data == "ready\n":
            break
    await client.stop(grace_s=10, dump_stacks=True)
    text, states, exit_code = await collect(client)
    assert states[-1] is S.TERMINATED and exit_code == 128 + 6, (states, exit_code)
    assert "Fatal Python error: Aborted" in text[LogStream.STDERR], text
    assert "in waiting_in_a_collective" in text[LogStream.STDERR], text
    assert "SIGABRT to the process group" in text[LogStream.RUNNER]


async def test_stop_before_run_terminates(client: RunnerClient) -> None:
    await client.submit(JobSpec(run_id="r", argv=["true"]))
    assert (await client.stop(0)).state is S.TERMINATED
    assert (await client.stop(0)).state is S.TERMINATED  # repeatable
    with pytest.raises(RunnerAPIError):
        await client.run()


async def test_max_duration(client: RunnerClient) -> None:
    await client.submit(
        JobSpec(run_id="r", argv=[PY, "-c", "import time; time.sleep(30)"], max_duration_s=0.3)
    )
    await client.run()
    text, states, _ = await collect(client)
    assert states[-1] is S.TERMINATED and "max_duration_s=0.3 reached" in text[LogStream.RUNNER]


async def test_missing_executable_fails_cleanly(client: RunnerClient) -> None:
    await client.submit(JobSpec(run_id="r", argv=["/nonexistent/prog"]))
    assert (await client.run()).state is S.FAILED
    text, states, exit_code = await collect(client)
    assert states[-1] is S.FAILED and exit_code == 127 and "cannot start" in text[LogStream.RUNNER]


async def test_healthcheck_metrics_events_validation(client: RunnerClient) -> None:
    h = await client.healthcheck()
    assert (h.service, h.state) == ("tcl-runner", S.WAITING_SPEC)
    m = await client.metrics()
    assert m.processes == 0
    r = await client._http.get("/api/events", params={"after": -1})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "query.after"
    page = await client.events(0)
    assert [(e.state, e.data) for e in page.events] == [
        (S.WAITING_SPEC, None),
        (None, "runner_ready"),
    ]
    assert page.next == 2 and not page.more


async def test_long_poll_returns_when_an_event_arrives(client: RunnerClient) -> None:
    await client.submit(
        JobSpec(run_id="r", argv=[PY, "-c", "import time; time.sleep(0.3); print('x')"])
    )
    await client.run()
    page = await client.events(0)
    t0 = time.monotonic()
    nxt = await client.events(page.next, wait_s=60)
    # woken by the event (0.3 s away), not by the end of its 60 s wait, however loaded the box
    assert nxt.events and time.monotonic() - t0 < 30


async def test_client_translates_connection_errors() -> None:
    from tcl.runner.client import RunnerUnavailable

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with RunnerClient("http://nowhere", "t", transport=httpx.MockTransport(refuse)) as c:
        with pytest.raises(RunnerUnavailable):
            await c.healthcheck()
        with pytest.raises(RunnerUnavailable):
            await asyncio.wait_for(c.wait_healthy(timeout_s=0.2), 5)


async def test_output_written_while_stopping_comes_before_the_terminal_state(
    client: RunnerClient,
) -> None:
    prog = (
        "import signal, sys, time\n"
        "def bye(*_):\n"
        "    for i in range(2000): print('cleanup', i)\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    await client.submit(JobSpec(run_id="r", argv=[PY, "-c", prog]))
    await client.run()
    async for e in client.poll(0, wait_s=1):
        if e.data == "ready\n":
            break
    await client.stop(grace_s=30)
    events = [e async for e in client.poll(0)]
    assert events[-1].state is S.TERMINATED and events[-1].exit_code == 0
    out = "".join(e.data or "" for e in events if e.stream is LogStream.STDOUT)
    assert out.splitlines()[1:] == [f"cleanup {i}" for i in range(2000)]


async def test_output_of_a_child_outliving_the_job_is_drained_before_the_end(
    client: RunnerClient,
) -> None:
    # The main process exits at once; its child still holds stdout and writes 0.3 s later.
    await client.submit(JobSpec(run_id="r", argv=["sh", "-c", "(sleep 0.3; echo late) & exit 0"]))
    await client.run()
    text, states, exit_code = await collect(client)
    assert text[LogStream.STDOUT] == "late\n"
    assert (states[-1], exit_code) == (S.SUCCEEDED, 0)


async def test_unwritable_working_dir_is_a_storage_error(
    client: RunnerClient, runner: Runner, tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("not a dir")
    code = tarball({"a.py": b""})
    spec = JobSpec(
        run_id="r",
        argv=["true"],
        working_dir=str(tmp_path / "a-file" / "work"),
        code=CodeRef(sha256=sha(code), size=len(code)),
    )
    await client.submit(spec)
    with pytest.raises(RunnerAPIError) as e:
        await client.upload_code(code, sha(code))
    assert (e.value.status, e.value.error) == (500, "storage_error")
    assert runner.state is S.WAITING_CODE


async def test_metrics_cover_the_jobs_process_tree(client: RunnerClient) -> None:
    prog = (
        "import subprocess, time; p = subprocess.Popen(['sleep', '30']);"
        "print('up', flush=True); time.sleep(30)"
    )
    await client.submit(JobSpec(run_id="r", argv=[PY, "-c", prog]))
    await client.run()
    async for e in client.poll(0, wait_s=1):
        if e.data == "up\n":
            break
    m = await client.metrics()
    assert m.processes == 2 and m.memory_bytes > 1_000_000 and m.cpu_percent >= 0
    await client.stop(0)
