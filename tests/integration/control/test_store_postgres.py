"""The state store on a real PostgreSQL 15 (started by scripts/testbed/pg-up.sh)."""

from __future__ import annotations

import threading
import uuid

from sqlalchemy import text

from tcl.control.store import Store
from tests.testbed import private_schema
from tests.unit.control.test_metricstore import exercise_metricstore
from tests.unit.control.test_phasestore import exercise_phasestore
from tests.unit.control.test_store import exercise_migration, exercise_store


def test_postgres_store(postgres_url: str) -> None:
    store = Store(private_schema(postgres_url, "tcl_test"))
    try:
        exercise_store(store)
        assert store.engine.dialect.name == "postgresql"
    finally:
        store.close()


def test_a_version_1_postgres_store_is_migrated(postgres_url: str) -> None:
    exercise_migration(private_schema(postgres_url, "tcl_migrate"))


def test_postgres_metric_store(postgres_url: str) -> None:
    store = Store(private_schema(postgres_url, "tcl_metrics"))
    try:
        exercise_metricstore(store)
        assert store.engine.dialect.name == "postgresql"
    finally:
        store.close()


def test_postgres_phase_store(postgres_url: str) -> None:
    store = Store(private_schema(postgres_url, "tcl_phases"))
    try:
        exercise_phasestore(store)
        assert store.engine.dialect.name == "postgresql"
    finally:
        store.close()


def test_parallel_first_uses_of_a_fresh_postgres_create_the_schema_once(postgres_url: str) -> None:
    """Many `tcl` commands (or `tcl serve` daemons) of a team opening an empty database at once
    all succeed, and the schema (with its version row) is made exactly once."""
    schema = f"tcl_race_{uuid.uuid4().hex[:8]}"
    admin = Store(postgres_url)
    with admin.engine.begin() as c:
        c.execute(text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in postgres_url else "?"
    url = f"{postgres_url}{sep}options=-csearch_path%3D{schema}"
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def first_use() -> None:
        barrier.wait()
        try:
            Store(url).close()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    with admin.engine.begin() as c:
        rows = c.execute(text(f'SELECT count(*) FROM "{schema}".tcl_meta')).scalar_one()
    admin.close()
    assert rows == 1
