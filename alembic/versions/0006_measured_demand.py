"""A real pool's demand, measured: samples of offered and unserved tokens/s, and each billed hour's measured demand.

Revision ID: 0006
Revises: 0005

`demand_samples` holds what the demand sources measured, one row per (part, ts): `offered` is the whole demand
(a gateway's offered-tokens query, a demand file), `unserved` the part the pool did not serve (the serving stack's
queue growth in tokens/s); the tokens/s served come from the hourly rollups, so they are not stored twice. The key
stores a re-sent sample once. `service_hours.demand_measured_tps` is the demand a billed hour had (NULL: none was
measured).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TIMESTAMP = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "demand_samples",
        sa.Column("part", sa.String(length=20), nullable=False),
        sa.Column("ts", TIMESTAMP, nullable=False),
        sa.Column("demand_tps", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("part", "ts", name=op.f("pk_demand_samples")),
        sqlite_with_rowid=False,
    )
    with op.batch_alter_table("service_hours", schema=None) as batch_op:
        batch_op.add_column(sa.Column("demand_measured_tps", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("service_hours", schema=None) as batch_op:
        batch_op.drop_column("demand_measured_tps")
    op.drop_table("demand_samples")
