"""A sweep whose PostgreSQL goes away mid-way (every connection dropped, back after a while):
the `tcl serve` scheduler keeps going once it answers again.

Before, the first store error that escaped ``Scheduler.run`` ended its task: the daemon kept
answering and `tcl serve --status` still named a scheduler, but nothing was claimed again and
the entries still queued sat there until someone restarted the daemon by hand. Every outcome is
read from what the jobs wrote (one line each), not only from tcl's tables."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.control.test_sweep_local import Sweep, _ended, _manifest
from tests.integration.tclcli import user_env
from tests.polling import wait_until
from tests.testbed import postgres_outage, private_schema

ENTRIES = 24
OUTAGE_S = 8.0  # under the scheduler's lease (30 s): its entries stay its own


class PgSweep(Sweep):
    def __init__(self, root: Path, gpus: int, db_url: str) -> None:
        super().__init__(root, gpus)
        self.db_url = db_url

    def env(self) -> dict[str, str]:
        # the daemon stays once the sweep is done, for its status (the fixture stops it)
        return user_env(
            self.home,
            self.config,
            drop=(),
            TCL_DB_URL=self.db_url,
            COLUMNS="200",
            TCL_SERVE_IDLE_EXIT_S="600",
        )


@pytest.fixture
def pg_sweep(tmp_path: Path, postgres_url: str) -> Iterator[PgSweep]:
    s = PgSweep(tmp_path, 4, private_schema(postgres_url, "tcl_outage"))
    try:
        yield s
    finally:
        s.close()


def test_a_sweep_goes_on_after_its_postgres_came_back(pg_sweep: PgSweep) -> None:
    s = pg_sweep
    rows = [
        {"job_id": f"j{i:02d}", "job": f"j{i:02d}", "fail_until": 0, "sleep_s": 1.0}
        for i in range(ENTRIES)
    ]
    s.add("outage", _manifest(s.out.parent / "m.json", rows))
    wait_until(lambda: len(s.runs()), 120, "the first entries done", done=lambda n: n >= 4)
    postgres_outage(OUTAGE_S)
    s.wait("outage", _ended, 300)
    st = s.status("outage")
    assert st["counts"]["done"] == ENTRIES, (st, s.serve_log())
    ran = Counter(r[0] for r in s.runs())
    assert sorted(ran) == [f"j{i:02d}" for i in range(ENTRIES)] and set(ran.values()) == {1}, ran
    status = json.loads(s.tcl("serve", "--status").stdout)
    [loop] = [lp for lp in status["loops"] if lp["name"] == "scheduler"]
    assert loop["running"], loop
    assert loop["errors"] >= 1 and "state store" in loop["last_error"], loop  # it saw it
