"""Timestamps are 64-bit on every backend.

Revision ID: 0004
Revises: 0003

PostgreSQL's `integer` is 32-bit, so the first `*_ts` after 2038-01-19 failed
there (the store itself writes 2100-01-01 as a far-future marker). Every `*_ts`
column becomes `bigint` in place, data kept. SQLite's INTEGER already stores 64
bits, so on SQLite this revision changes nothing (the models keep INTEGER there).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TIMESTAMP_COLUMNS = {
    "cards": ("registered_ts", "retired_ts"),
    "ingest_runs": ("started_ts", "finished_ts"),
    "ingest_batches": ("committed_ts",),
    "telemetry_samples": ("ts",),
    "hourly_rollups": ("hour_ts",),
    "scores": ("hour_ts",),
    "run_set_intervals": ("start_ts", "end_ts"),
    "decisions": ("ts", "acted_ts"),
    "service_hours": ("hour_ts", "month_start_ts"),
    "bills": ("period_start_ts", "period_end_ts"),
}


def _retype(to_type, from_type) -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    for table, columns in TIMESTAMP_COLUMNS.items():
        for column in columns:
            op.alter_column(table, column, type_=to_type, existing_type=from_type)


def upgrade() -> None:
    _retype(sa.BigInteger(), sa.Integer())


def downgrade() -> None:
    _retype(sa.Integer(), sa.BigInteger())
