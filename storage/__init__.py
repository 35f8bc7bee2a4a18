"""The store: interfaces by role and their SQLAlchemy implementations, the models, engines with the SQLite pragmas.

`open_store(url)` (`storage.open`) is the way in: it returns a `Store`, one
database in every role the shell types against (`storage.interfaces`):
`TelemetryStore` (ingest, rollups, stored months; `SqlRepository` in
`storage.repository`), `JournalStore` (the service's journal, run set, scores and
billed hours; `ServiceStore` in `storage.service_store`), `Leases` (one service
leads a store; `storage.lease`), `IdentityRecord` (what the store holds;
`storage.identity`), `ReconcileStore` (the reconcile check's reads and writes;
`storage.cards`) and `Migrations` (`storage.db`). The engine stays inside
`storage`. `storage` imports nothing of `fleet` but `fleet.core`.

Alembic (alembic/ at the repository root) owns the schema; `storage.db.upgrade`
runs it from code. Names are imported on first use, so `import storage` (and
every `fleet` command) does not pay for SQLAlchemy and pandas until it needs them.
"""

from __future__ import annotations

import importlib

DEFAULT_URL = "sqlite:///fleet.db"  # a file in the working folder

_WHERE = {
    "StoreError": "storage.db",
    "current_revision": "storage.db",
    "head_revision": "storage.db",
    "make_engine": "storage.db",
    "upgrade": "storage.db",
    "IdentityRecord": "storage.interfaces",
    "JournalStore": "storage.interfaces",
    "Leases": "storage.interfaces",
    "Migrations": "storage.interfaces",
    "ReconcileStore": "storage.interfaces",
    "Store": "storage.interfaces",
    "TelemetryStore": "storage.interfaces",
    "open_store": "storage.open",
    "as_store": "storage.open",
    "BatchOrigin": "storage.values",
    "BatchOutcome": "storage.values",
    "CardInfo": "storage.values",
    "ClassSpec": "storage.values",
    "class_specs": "storage.values",
    "HourFigures": "storage.values",
    "JournalEntry": "storage.values",
    "JournalRow": "storage.values",
    "Pruned": "storage.values",
    "Rejected": "storage.values",
    "SampleBatch": "storage.values",
    "SqlRepository": "storage.repository",
    "open_repository": "storage.repository",
    "sqlite_memory_repository": "storage.repository",
    "ServiceStore": "storage.service_store",
    "LeaseRecord": "storage.lease",
    "LeaseStore": "storage.lease",
    "StoreIdentity": "storage.identity",
    "claim_identity": "storage.identity",
    "read_identity": "storage.identity",
}

__all__ = ["DEFAULT_URL", *_WHERE]


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'storage' has no attribute {name!r}")
