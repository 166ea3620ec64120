"""``POST /api/start``: submit, the tree from the host's code cache and run in one request; a
tree the cache lacks answers ``waiting_code`` (upload, then run), a repeat changes nothing, a bad
spec is a 422 naming its field, and a runner without the route is a 404 the control plane falls
back from (``HttpRunner.start`` -> None)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette

from tcl.control.transport.httpagents import HttpRunner
from tcl.runner.api import CodeRef, JobSpec, RunnerState
from tcl.runner.app import create_app
from tcl.runner.client import RunnerAPIError, RunnerClient
from tcl.runner.service import Runner, RunnerConfig
from tests.unit.runner.conftest import PY, TOKEN, sha, tarball

CODE = tarball({"main.py": b"print('from the tree')\n"})
SPEC = JobSpec(run_id="r", argv=[PY, "main.py"], code=CodeRef(sha256=sha(CODE), size=len(CODE)))


@pytest.fixture
async def runners(tmp_path: Path) -> AsyncIterator[list[tuple[Runner, RunnerClient]]]:
    """Two runners of one host: they share its code cache."""
    made: list[tuple[Runner, RunnerClient]] = []
    for name in ("one", "two"):
        r = Runner(RunnerConfig(state_dir=tmp_path / name, code_cache_dir=tmp_path / "cache"))
        transport = httpx.ASGITransport(app=create_app(r, TOKEN))
        made.append((r, RunnerClient("http://runner", TOKEN, transport=transport)))
    yield made
    for r, c in made:
        await c.aclose()
        r.stop(0)
        r.wait(10)
        r.close()


async def test_a_tree_the_host_has_is_started_in_one_request(
    runners: list[tuple[Runner, RunnerClient]],
) -> None:
    (first, c1), (second, c2) = runners
    # the first runner of this code: the cache lacks it, so the start stops short of the job
    assert (await c1.start(SPEC)).state is RunnerState.WAITING_CODE
    assert first.executor is None
    assert (await c1.upload_code(CODE, sha(CODE))).state is RunnerState.READY
    assert (await c1.run()).state is RunnerState.RUNNING
    # the next one finds the tree the first extracted: spec, tree and run in one request
    assert (await c2.start(SPEC)).state is RunnerState.RUNNING
    # a retried request changes nothing (the short job may have ended meanwhile)
    assert (await c2.start(SPEC)).state in (RunnerState.RUNNING, RunnerState.SUCCEEDED)
    assert second.wait(30)
    assert second.machine.exit_code == 0
    page = await c2.events(0)
    assert "".join(e.data or "" for e in page.events).count("from the tree") == 1


async def test_a_bad_or_conflicting_spec_is_refused_naming_the_field(
    runners: list[tuple[Runner, RunnerClient]],
) -> None:
    (_, c1), _ = runners
    res = await c1._http.post("/api/start", json={"spec": {"run_id": "r", "argv": "no list"}})
    assert res.status_code == 422
    assert res.json()["error"] == "invalid_spec"
    assert [f["field"] for f in res.json()["detail"]] == ["spec.argv"]
    assert (await c1.start(SPEC)).state is RunnerState.WAITING_CODE
    with pytest.raises(RunnerAPIError) as e:
        await c1.start(SPEC.model_copy(update={"run_id": "other"}))
    assert e.value.status == 409


async def test_a_runner_without_the_route_is_told_apart() -> None:
    """An older runner (no /api/start) answers 404: HttpRunner says None, and the launch
    submits, ships and runs as before (tcl.control.backends.shim)."""
    old = Starlette()  # every route unknown: 404, as a runner from before the route answers
    runner = HttpRunner("http://runner", TOKEN)
    runner._client._http = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=old), base_url="http://runner"
    )
    try:
        assert await runner.start(SPEC) is None
    finally:
        await runner.aclose()


async def test_a_start_that_found_no_tree_ships_without_asking_the_cache_again(
    runners: list[tuple[Runner, RunnerClient]], tmp_path: Path
) -> None:
    """After ``waiting_code`` the cache was asked already: the local host uploads the tarball
    at once (the cache is asked only on the old submit, ship, run path)."""
    from tcl.control.backends.local import LocalShimHost
    from tcl.control.config import LocalHost
    from tcl.control.shipping import Snapshot

    (first, _), _ = runners
    paths: list[str] = []

    async def record(req: httpx.Request) -> None:
        paths.append(req.url.path)

    runner = HttpRunner("http://runner", TOKEN)
    runner._client._http = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(first, TOKEN)),
        base_url="http://runner",
        headers=runner._client._http.headers,
        event_hooks={"request": [record]},
    )
    (tmp_path / "code.tar.gz").write_bytes(CODE)
    snap = Snapshot(tmp_path, tmp_path / "code.tar.gz", sha(CODE), len(CODE), 1, len(CODE), False)
    host = LocalShimHost("local", LocalHost(type="local"), tmp_path / "shim")
    try:
        assert await runner.start(SPEC) is RunnerState.WAITING_CODE
        assert await host.ship_code(snap, 0, TOKEN, runner, None, cache_checked=True) == 0
        await runner.run()
    finally:
        await runner.aclose()
    assert paths == ["/api/start", "/api/code", "/api/run"], paths
    assert first.wait(30) and first.machine.exit_code == 0
