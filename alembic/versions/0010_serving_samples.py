"""What a card's serving stack measured beside its rate: the mean batch, time per output token and first token.

Revision ID: 0010
Revises: 0009

`serving_samples` holds, per stored telemetry sample that carried them, the card's mean batch (vLLM's running
requests), the mean time per output token its streams saw, the mean time to first token and the share of first
tokens within the promise's. Each card's step against its batch is fitted from the first two
(`fleet.core.curve_fit`). A table of its own, keyed as `telemetry_samples`: a pool whose telemetry carries none of
them stores nothing more, and the samples' bulk path is unchanged.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

TIMESTAMP = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "serving_samples",
        sa.Column("card_id", sa.Integer(), nullable=False),
        sa.Column("ts", TIMESTAMP, nullable=False),
        sa.Column("batch_mean", sa.Float(), nullable=True),
        sa.Column("tpot_s", sa.Float(), nullable=True),
        sa.Column("ttft_s", sa.Float(), nullable=True),
        sa.Column("ttft_ok_share", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["card_id"], ["cards.id"], name=op.f("fk_serving_samples_card_id_cards")),
        sa.PrimaryKeyConstraint("card_id", "ts", name=op.f("pk_serving_samples")),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.drop_table("serving_samples")
