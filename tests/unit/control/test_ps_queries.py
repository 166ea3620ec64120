"""`tcl ps -a` reads its runs in a bounded number of queries, not one per run (issue 29): the
refresh re-read each run (and each live run's latest attempt) one query at a time."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import event

from tcl.control.config import parse_config
from tcl.control.lifecycle.refresh import refresh_many
from tcl.control.runrequest import RunRequest
from tcl.control.service import Control
from tcl.control.states import RunState
from tcl.control.store import Store


async def test_refreshing_many_runs_takes_a_few_queries(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'tcl.db'}")
    for i in range(60):
        run_id = f"r{i:03d}-aaaaaa"
        store.create_run(run_id, f"r{i}", RunRequest(argv=["true"], chips=0))
        if i % 2:  # half ended; the other half placed on a host with no attempt recorded
            store.set_state(run_id, RunState.TERMINATED, message="test")
        else:
            store.set_state(run_id, RunState.PROVISIONING)
            store.set_placement(run_id, "gone", "ssh", "0" * 64)
    ctl = Control(parse_config("hosts: {}\n"), store)
    runs = store.list_runs(limit=None)
    statements: list[str] = []

    def count(*args: object) -> None:
        statements.append(str(args[2]))

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        fresh = await refresh_many(ctl, runs)
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
        await ctl.aclose()
    assert [r.id for r in fresh] == [r.id for r in runs]
    assert len(statements) <= 5, statements
