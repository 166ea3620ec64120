"""Batch mode and the command line, run as real processes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from tcl.runner.api import CodeRef, JobSpec, LogStream
from tcl.runner.events import EventLog
from tests.polling import await_until
from tests.unit.runner.conftest import PY, TOKEN, sha, tarball

RUNNER = [sys.executable, "-m", "tcl.runner.main"]


def write_spec(tmp_path: Path, spec: JobSpec, token: str | None = None) -> Path:
    """The spec file as a scheduler's job script would leave it: 0600, token beside the spec."""
    path = tmp_path / "spec.json"
    body = spec.model_dump(mode="json")
    if token is not None:
        body["runner_token"] = token
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(body, f)
    return path


def batch_argv(spec: Path, state_dir: Path, *extra: str, code: Path | None = None) -> list[str]:
    """``tcl-runner batch`` as a scheduler's job script runs it."""
    code_args = ["--code", str(code)] if code is not None else []
    return [
        *RUNNER,
        "batch",
        "--spec",
        str(spec),
        *code_args,
        "--state-dir",
        str(state_dir),
        *extra,
    ]


def run_batch(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def write_token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(TOKEN)
    return path


def test_batch_runs_the_job_and_writes_status_and_events(tmp_path: Path) -> None:
    code = tarball({"job.py": b"import os; print('hi', os.environ['S']); raise SystemExit(4)"})
    (tmp_path / "code.tgz").write_bytes(code)
    spec = JobSpec(
        run_id="b1",
        argv=[PY, "job.py"],
        secrets={"S": "topsecret"},
        code=CodeRef(sha256=sha(code), size=len(code)),
    )
    state_dir = tmp_path / "state"
    proc = run_batch(batch_argv(write_spec(tmp_path, spec), state_dir, code=tmp_path / "code.tgz"))
    assert proc.returncode == 4, proc.stderr
    status = json.loads((state_dir / "status.json").read_text())
    assert (status["version"], status["run_id"], status["state"], status["exit_code"]) == (
        1,
        "b1",
        "failed",
        4,
    )
    events, _ = EventLog(state_dir / "events").read(0)
    assert [e.state for e in events if e.state] == [
        "waiting_spec",
        "waiting_code",
        "ready",
        "running",
        "failed",
    ]
    assert "hi ***\n" in [e.data for e in events]
    assert b"topsecret" not in (state_dir / "events" / "events.jsonl").read_bytes()


def test_batch_refuses_a_bad_spec_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "spec.json"
    bad.write_text(json.dumps({"run_id": "x", "argv": ["true"], "max_duration_s": -1}))
    proc = run_batch(batch_argv(bad, tmp_path / "s"))
    assert proc.returncode == 2 and "max_duration_s" in proc.stderr


def test_batch_with_a_wrong_code_hash_never_runs(tmp_path: Path) -> None:
    code = tarball({"job.py": b"print(1)"})
    (tmp_path / "code.tgz").write_bytes(code + b"x")
    spec = JobSpec(run_id="b", argv=[PY, "job.py"], code=CodeRef(sha256=sha(code), size=len(code)))
    state_dir = tmp_path / "state"
    proc = run_batch(batch_argv(write_spec(tmp_path, spec), state_dir, code=tmp_path / "code.tgz"))
    assert proc.returncode == 2 and "sha256" in proc.stderr
    assert json.loads((state_dir / "status.json").read_text())["state"] == "terminated"
    assert not (state_dir / "work").exists()


def test_openapi_is_generated_from_the_models() -> None:
    proc = subprocess.run(
        [*RUNNER, "openapi"], capture_output=True, text=True, timeout=60, check=True
    )
    spec = json.loads(proc.stdout)
    assert {
        "/api/submit",
        "/api/code",
        "/api/run",
        "/api/events",
        "/api/stop",
        "/api/metrics",
        "/api/healthcheck",
    } <= set(spec["paths"])
    assert "JobSpec" in spec["components"]["schemas"]


def test_start_up_imports_nothing_heavy() -> None:
    probe = (
        "import sys; import tcl.runner.main, tcl.runner.server, tcl.runner.app;"
        "heavy = ('jax', 'asyncssh', 'docker', 'psutil', 'sqlalchemy');"
        "bad = [m for m in heavy if m in sys.modules];"
        "print(bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert out.strip() == "[]"


async def test_batch_serve_offers_live_logs(tmp_path: Path) -> None:
    import socket

    from tcl.runner.client import RunnerClient

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    prog = "import time\nfor i in range(5):\n    print('tick', i, flush=True); time.sleep(0.1)\n"
    spec = JobSpec(run_id="bs", argv=[PY, "-c", prog])
    proc = await asyncio.create_subprocess_exec(
        *batch_argv(
            write_spec(tmp_path, spec, TOKEN),
            tmp_path / "state",
            "--serve",
            f"127.0.0.1:{port}",
            "--linger-s",
            "2",
        )
    )
    try:
        async with RunnerClient(f"http://127.0.0.1:{port}", TOKEN) as client:
            await client.wait_healthy(timeout_s=20)
            events = [e async for e in client.follow(0)]
        out = "".join(e.data or "" for e in events if e.stream == "stdout")
        assert out.splitlines() == [f"tick {i}" for i in range(5)]
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_a_server_that_cannot_bind_leaves_no_job_running(tmp_path: Path) -> None:
    """The job starts before the server is built (its first line is not held up by uvicorn's
    imports): when the server then cannot listen, the job is stopped, not left behind. The job
    may be stopped before its Python has run a line, so it is found by a mark in its argv."""
    import socket

    import psutil

    mark = f"tcl-unbound-job-{os.getpid()}-{tmp_path.name}"
    spec = JobSpec(run_id="nb", argv=[PY, "-c", "import time; time.sleep(60)", mark])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        res = run_batch(
            batch_argv(
                write_spec(tmp_path, spec, TOKEN),
                tmp_path / "state",
                "--serve",
                f"127.0.0.1:{port}",
            )
        )
    assert res.returncode != 0 and "Address already in use" in res.stderr, res.stderr
    left = [p for p in psutil.process_iter(["cmdline"]) if mark in (p.info["cmdline"] or [])]
    for p in left:
        p.kill()
    assert not left, f"job {[p.pid for p in left]} outlived its runner"


async def _serve(tmp_path: Path, *extra: str) -> tuple[asyncio.subprocess.Process, str]:
    port_file = tmp_path / "port"
    proc = await asyncio.create_subprocess_exec(
        *RUNNER,
        "serve",
        "--port",
        "0",
        "--port-file",
        str(port_file),
        "--state-dir",
        str(tmp_path / "state"),
        "--token-file",
        str(write_token(tmp_path)),
        *extra,
    )
    port = await await_until(
        lambda: port_file.exists() and port_file.read_text().strip(), 60, "the runner's port file"
    )
    return proc, f"http://127.0.0.1:{port}"


async def test_serve_linger_exits_with_the_jobs_exit_code(tmp_path: Path) -> None:
    from tcl.runner.client import RunnerClient

    proc, url = await _serve(tmp_path, "--linger-s", "0.5")
    try:
        async with RunnerClient(url, TOKEN) as client:
            await client.wait_healthy()
            await client.submit(JobSpec(run_id="l", argv=[PY, "-c", "raise SystemExit(3)"]))
            await client.run()
            events = [e async for e in client.follow(0)]
        assert events[-1].exit_code == 3
        assert await asyncio.wait_for(proc.wait(), 20) == 3
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_sigterm_stops_the_job_then_the_server(tmp_path: Path) -> None:
    from tcl.runner.client import RunnerClient

    proc, url = await _serve(tmp_path)
    try:
        async with RunnerClient(url, TOKEN) as client:
            await client.wait_healthy()
            await client.submit(JobSpec(run_id="t", argv=["sleep", "600"]))
            await client.run()
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 20) == 128 + 15
        events, _ = EventLog(tmp_path / "state" / "events").read(0)
        assert events[-1].state == "terminated"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_batch_keeps_metric_lines_as_metric_events(tmp_path: Path) -> None:
    """SLURM and Volcano run the runner in batch mode: its metric events are the same."""
    job = b'print("x"); print(\'TCL_METRIC {"step": 3, "kind": "train", "loss": 0.5}\')'
    code = tarball({"job.py": job})
    (tmp_path / "code.tgz").write_bytes(code)
    spec = JobSpec(run_id="b2", argv=[PY, "job.py"], code=CodeRef(sha256=sha(code), size=len(code)))
    state_dir = tmp_path / "state"
    proc = run_batch(batch_argv(write_spec(tmp_path, spec), state_dir, code=tmp_path / "code.tgz"))
    assert proc.returncode == 0, proc.stderr
    events, _ = EventLog(state_dir / "events").read(0)
    assert [(e.kind.value, e.data) for e in events if e.stream is LogStream.STDOUT] == [
        ("log", "x\n"),
        ("metric", '{"kind":"train","loss":0.5,"step":3}'),
    ]
