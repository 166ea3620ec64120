"""The sweep queue on a real PostgreSQL 15 (scripts/testbed/pg-up.sh): claims by concurrent
processes (``FOR UPDATE SKIP LOCKED``) and the late-owner guard, each in a private schema."""

from __future__ import annotations

from tcl.control.store import Store
from tcl.control.sweep.queue import SweepQueue
from tests.integration.control.test_sweep_queue_claims import exercise_concurrent_claims
from tests.testbed import private_schema
from tests.unit.control.test_sweep_queue import exercise_late_owner


def test_postgres_concurrent_claims(postgres_url: str) -> None:
    exercise_concurrent_claims(
        private_schema(postgres_url, "tcl_sweep"), entries=2000, workers=4, batch=10
    )


def test_postgres_late_owner_changes_nothing(postgres_url: str) -> None:
    store = Store(private_schema(postgres_url, "tcl_sweep"))
    queue = SweepQueue(store)
    try:
        assert store.engine.dialect.name == "postgresql"
        exercise_late_owner(queue)
    finally:
        queue.close()
        store.close()
