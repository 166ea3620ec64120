"""The state store: runs and their attempts (SQLAlchemy 2; SQLite WAL or PostgreSQL).

- :mod:`.db`: the engine (SQLite pragmas, a private file), the schema lock, opening (schema
  version check, migrations), sessions; :class:`~.db.StoreBase` owns the engine.
- :mod:`.tables`: the ORM rows and :data:`~.tables.TableBase`, which other modules' tables
  (sweeps, retries, leases, metrics) are made with.
- :mod:`.records`: the :class:`~.records.Run` and :class:`~.records.Attempt` records.
- :mod:`.listing`: :class:`~.listing.RunListing`, the readers of many runs and attempts
  (references, pages, searches, counts).
- :mod:`.runs`: :class:`~.runs.Store`, the guarded writers (and the listing's readers).

Everything other modules use is re-exported here: ``from tcl.control.store import Store``.
"""

from tcl.control.store.db import SCHEMA_VERSION, StoreBase
from tcl.control.store.records import Attempt, Placement, Run
from tcl.control.store.runs import Store, new_run_id
from tcl.control.store.tables import AttemptRow, MetaRow, RunHealthRow, RunRow, TableBase

__all__ = [
    "SCHEMA_VERSION",
    "Attempt",
    "AttemptRow",
    "MetaRow",
    "Placement",
    "Run",
    "RunHealthRow",
    "RunRow",
    "Store",
    "StoreBase",
    "TableBase",
    "new_run_id",
]
