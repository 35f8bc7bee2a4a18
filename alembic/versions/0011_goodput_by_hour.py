"""Each billed hour's goodput under a promise.

Revision ID: 0011
Revises: 0010

`service_hours.goodput_tps` is the tokens/s a billed hour served within the pool's promise (`[slo]`): the bill job
reads it as replay's verdict does (`fleet.core.latency`), and the month's capacity and latency checks read it. NULL:
the hour was billed with no promise (or before this revision), and its checks are the fluid model's.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("service_hours", schema=None) as batch_op:
        batch_op.add_column(sa.Column("goodput_tps", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("service_hours", schema=None) as batch_op:
        batch_op.drop_column("goodput_tps")
