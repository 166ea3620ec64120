"""The sweep queue on a real PostgreSQL 15 (scripts/testbed/pg-up.sh): claims by concurrent
processes (``FOR UPDATE SKIP LOCKED``) and the late-owner guard, each in a private schema."""

from __future__ import annotations

import uuid

from sqlalchemy import text

from tcl.control.store import Store
from tcl.control.sweep.queue import SweepQueue
from tests.unit.control.test_sweep_queue import exercise_concurrent_claims, exercise_late_owner


def _private_schema(postgres_url: str) -> str:
    """The URL of a fresh schema of its own (its ``search_path``)."""
    schema = f"tcl_sweep_{uuid.uuid4().hex[:8]}"
    admin = Store(postgres_url)
    with admin.engine.begin() as c:
        c.execute(text(f'CREATE SCHEMA "{schema}"'))
    admin.close()
    sep = "&" if "?" in postgres_url else "?"
    return f"{postgres_url}{sep}options=-csearch_path%3D{schema}"


def test_postgres_concurrent_claims(postgres_url: str) -> None:
    exercise_concurrent_claims(_private_schema(postgres_url), entries=2000, workers=4, batch=10)


def test_postgres_late_owner_changes_nothing(postgres_url: str) -> None:
    store = Store(_private_schema(postgres_url))
    queue = SweepQueue(store)
    try:
        assert store.engine.dialect.name == "postgresql"
        exercise_late_owner(queue)
    finally:
        queue.close()
        store.close()
