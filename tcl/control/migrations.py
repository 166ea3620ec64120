"""The state store's schema versions and the steps between them.

A store records its schema version (``tcl_meta``). Opening an older one runs each step after
it, in order, under the schema lock (one migrator, however many ``tcl`` commands and daemons
open it at once), then records the new version. A step uses only portable DDL, so the same
step runs on SQLite and PostgreSQL. Tables added later need no step: ``create_all`` makes
them; a step is needed when an existing table gains a column or a state changes meaning.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection, inspect, text

Step = Callable[[Connection], None]


def _attempt_cause(conn: Connection) -> None:
    """v2: why each attempt ended (``tcl.control.states.AttemptCause``); '' for attempts
    recorded before (and for those not ended)."""
    conn.execute(text("ALTER TABLE tcl_attempts ADD COLUMN cause VARCHAR(32) NOT NULL DEFAULT ''"))


def _waiting_retry(conn: Connection) -> None:
    """v3: a run waiting to be placed again has its own state (``waiting_retry``); before, it
    was ``queued`` with a waiting row in ``tcl_run_retries`` (a store that never retried a
    run has no such table)."""
    if not inspect(conn).has_table("tcl_run_retries"):
        return
    conn.execute(
        text(
            "UPDATE tcl_runs SET state = 'waiting_retry' WHERE state = 'queued' AND id IN "
            "(SELECT run_id FROM tcl_run_retries WHERE waiting)"
        )
    )


def _add_columns(conn: Connection, table: str, columns: dict[str, str]) -> None:
    """Add the ``columns`` (name -> portable type) ``table`` lacks; a table not made yet is
    made whole by ``create_all`` when its module is imported."""
    found = inspect(conn)
    if not found.has_table(table):
        return
    have = {c["name"] for c in found.get_columns(table)}
    for name, kind in columns.items():
        if name not in have:
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {name} {kind}"))


def _attempt_times_and_claimers(conn: Connection) -> None:
    """v4: when each attempt's job started and ended and its pid (NULL for attempts recorded
    before); which scheduler claimed each matrix entry last ('' before)."""
    _add_columns(
        conn, "tcl_attempts", {"started_at": "FLOAT", "ended_at": "FLOAT", "pid": "INTEGER"}
    )
    _add_columns(conn, "tcl_matrix_entries", {"scheduler": "VARCHAR(64) NOT NULL DEFAULT ''"})


# version -> the step that makes it from the one before
STEPS: dict[int, Step] = {2: _attempt_cause, 3: _waiting_retry, 4: _attempt_times_and_claimers}
LATEST = max(STEPS)


def migrate(conn: Connection, found: int) -> int:
    """Run the steps after version ``found``; the version the store has now."""
    for version in sorted(v for v in STEPS if v > found):
        STEPS[version](conn)
        found = version
    return found
