"""The store: two interfaces by role and their SQLAlchemy implementations, the models, engines with the SQLite pragmas.

`storage.interfaces` holds the protocols the shell types against: `TelemetryStore`
(ingest, rollups, stored months; `SqlRepository` in `storage.repository`) and
`JournalStore` (the service's journal, run set, scores and billed hours;
`ServiceStore` in `storage.service_store`). Beside them: the lease that lets one
service lead a store (`storage.lease`) and what the store holds (`storage.identity`).
`storage` imports nothing of `fleet` but `fleet.core`.

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
    "JournalStore": "storage.interfaces",
    "TelemetryStore": "storage.interfaces",
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
