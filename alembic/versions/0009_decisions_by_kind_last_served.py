"""The journal indexed by kind, and each card's last sample with tokens kept on the card.

Revision ID: 0009
Revises: 0008

Every hour the decide job and the reconcile check read a few kinds of record: the cards retired by hand, the actions
set aside, the open mismatches. With no index on the kind, each read walked the journal, which grows by every action
the service takes (about 500 an hour at 10,000 cards, so about 380,000 a month): late in a month those reads were
most of a tick. An index on (kind, ts) reads the rows of a kind alone.

The check for stopped cards that still serve read every release, eviction and retirement of the last 40 days, then
each such card's samples: a month of actions every tick. `cards.last_served_ts` keeps each card's last sample with
tokens, written by the ingest that stores it, so the check starts from the few cards that served lately and are not
warm. It is filled here from the samples.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

TIMESTAMP = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
BY_KIND = "ix_decisions_kind_ts"


def upgrade() -> None:
    op.create_index(BY_KIND, "decisions", ["kind", "ts"], unique=False)
    with op.batch_alter_table("cards") as batch:
        batch.add_column(sa.Column("last_served_ts", TIMESTAMP, nullable=True))
    op.execute(
        "UPDATE cards SET last_served_ts = "
        "(SELECT MAX(s.ts) FROM telemetry_samples s WHERE s.card_id = cards.id AND s.tokens_per_s > 0)"
    )


def downgrade() -> None:
    # A plain DROP COLUMN, as 0008's downgrade: a batch rebuild of `cards` is refused by the rows that refer to it.
    op.execute("ALTER TABLE cards DROP COLUMN last_served_ts")
    op.drop_index(BY_KIND, table_name="decisions")
