"""The state store on a real PostgreSQL 15 (started by scripts/testbed/pg-up.sh)."""

from __future__ import annotations

import uuid

from sqlalchemy import text

from tcl.control.store import Store
from tests.unit.control.test_store import exercise_store


def test_postgres_store(postgres_url: str) -> None:
    schema = f"tcl_test_{uuid.uuid4().hex[:8]}"
    admin = Store(postgres_url)  # creates the tables in public; we use a private schema below
    with admin.engine.begin() as c:
        c.execute(text(f'CREATE SCHEMA "{schema}"'))
    admin.close()
    sep = "&" if "?" in postgres_url else "?"
    store = Store(f"{postgres_url}{sep}options=-csearch_path%3D{schema}")
    try:
        exercise_store(store)
        assert store.engine.dialect.name == "postgresql"
    finally:
        store.close()
