"""The store: SQLAlchemy models, the repository interface `fleet` calls, and engines with the SQLite pragmas.

Alembic (alembic/ at the repository root) owns the schema; `storage.db.upgrade`
runs it from code.
"""

from storage.db import DEFAULT_URL, StoreError, current_revision, head_revision, make_engine, upgrade
from storage.repository import (
    BatchOutcome,
    CardInfo,
    ClassSpec,
    Rejected,
    Repository,
    RunSummary,
    SampleBatch,
    SqlRepository,
    memory_repository,
    open_repository,
)

__all__ = [
    "DEFAULT_URL",
    "BatchOutcome",
    "CardInfo",
    "ClassSpec",
    "Rejected",
    "Repository",
    "RunSummary",
    "SampleBatch",
    "SqlRepository",
    "StoreError",
    "current_revision",
    "head_revision",
    "make_engine",
    "memory_repository",
    "open_repository",
    "upgrade",
]
