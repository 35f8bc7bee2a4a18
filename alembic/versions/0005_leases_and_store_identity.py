"""One leader per store, and a store that knows what it holds.

Revision ID: 0005
Revises: 0004

`leases` holds one row per lease (the service's is named `fleet`): its holder, its
epoch (one more at every new holder) and when it was taken, renewed and expires,
as float epoch seconds. `store_meta` is a small key/value table; its `identity`
row says what the store holds (a simulation of a preset with its seed and hours,
or a real pool), so a `fleet serve` of something else is refused.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("acquired_ts", sa.Float(), nullable=False),
        sa.Column("renewed_ts", sa.Float(), nullable=False),
        sa.Column("expires_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_leases")),
    )
    op.create_table(
        "store_meta",
        sa.Column("key", sa.String(length=100), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_store_meta")),
    )


def downgrade() -> None:
    op.drop_table("store_meta")
    op.drop_table("leases")
