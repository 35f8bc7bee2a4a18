"""Cards can be retired (an evicted card leaves the pool); quarantine is indexed by reason.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("cards", schema=None) as batch_op:
        batch_op.add_column(sa.Column("retired_ts", sa.Integer(), nullable=True))
    with op.batch_alter_table("quarantined_input", schema=None) as batch_op:
        batch_op.create_index("ix_quarantined_input_reason", ["reason"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("quarantined_input", schema=None) as batch_op:
        batch_op.drop_index("ix_quarantined_input_reason")
    with op.batch_alter_table("cards", schema=None) as batch_op:
        batch_op.drop_column("retired_ts")
