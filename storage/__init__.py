"""The store: SQLAlchemy models, the repository interface `fleet` calls, and engines with the SQLite pragmas.

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
    "BatchOutcome": "storage.repository",
    "CardInfo": "storage.repository",
    "ClassSpec": "storage.repository",
    "Rejected": "storage.repository",
    "Repository": "storage.repository",
    "SampleBatch": "storage.repository",
    "SqlRepository": "storage.repository",
    "open_repository": "storage.repository",
    "sqlite_memory_repository": "storage.repository",
}

__all__ = ["DEFAULT_URL", *_WHERE]


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'storage' has no attribute {name!r}")
