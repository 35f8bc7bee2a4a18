"""Rollups kept in hour order, each card's last telemetry kept on the card, and open run-set intervals indexed.

Revision ID: 0008
Revises: 0007

Every hour the score job reads one hour's rollups of every card (and the measured demand sums the same rows).
Keyed by card first, those rows lie one in every card's stretch of the table, so an hour's read was a seek per card,
where keyed by hour it is one range. The key becomes
(hour_ts, card_id); an index on (card_id, hour_ts) keeps the reads that ask for a card's hours (a batch's pruned
hours) a range scan.

The reconcile check reads every card's last telemetry every tick. It was the maximum of each card's samples and of
its rollups, two seeks per card; `cards.last_heard_ts` keeps it, written by the ingest that
stores a newer sample, and filled here from the samples (or, where they were pruned, the end of the card's last
rolled-up hour, as the check read it before).

The run set at an hour (and each warm card's start) was a scan of every run-set interval the store ever held, which
grows all month; an index on (end_ts, card_id, start_ts) answers it from the open intervals and those ending after the
hour alone.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TIMESTAMP = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
COLUMNS = "card_id, hour_ts, sample_count, tokens_per_s_sum, busy_count, busy_fraction_sum, busy_tokens_per_s_sum"
BY_CARD = "ix_hourly_rollups_card_hour"
OPEN = "ix_run_set_intervals_open"


def _rebuild_sqlite(key: tuple[str, ...]) -> None:
    op.create_table(
        "hourly_rollups_rekeyed",
        sa.Column("card_id", sa.Integer(), nullable=False),
        sa.Column("hour_ts", TIMESTAMP, nullable=False),
        sa.Column("sample_count", sa.Integer(), nullable=False),
        sa.Column("tokens_per_s_sum", sa.Float(), nullable=False),
        sa.Column("busy_count", sa.Integer(), nullable=False),
        sa.Column("busy_fraction_sum", sa.Float(), nullable=False),
        sa.Column("busy_tokens_per_s_sum", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["card_id"], ["cards.id"], name=op.f("fk_hourly_rollups_card_id_cards")),
        sa.PrimaryKeyConstraint(*key, name=op.f("pk_hourly_rollups")),
        sqlite_with_rowid=False,
    )
    op.execute(f"INSERT INTO hourly_rollups_rekeyed ({COLUMNS}) SELECT {COLUMNS} FROM hourly_rollups ORDER BY {', '.join(key)}")
    op.drop_table("hourly_rollups")
    op.rename_table("hourly_rollups_rekeyed", "hourly_rollups")


def _rekey(key: tuple[str, ...]) -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite(key)
    else:
        op.drop_constraint(op.f("pk_hourly_rollups"), "hourly_rollups", type_="primary")
        op.create_primary_key(op.f("pk_hourly_rollups"), "hourly_rollups", list(key))


def upgrade() -> None:
    _rekey(("hour_ts", "card_id"))
    op.create_index(BY_CARD, "hourly_rollups", ["card_id", "hour_ts"], unique=False)
    op.create_index(OPEN, "run_set_intervals", ["end_ts", "card_id", "start_ts"], unique=False)
    with op.batch_alter_table("cards") as batch:
        batch.add_column(sa.Column("last_heard_ts", TIMESTAMP, nullable=True))
    op.execute(
        "UPDATE cards SET last_heard_ts = COALESCE("
        "(SELECT MAX(s.ts) FROM telemetry_samples s WHERE s.card_id = cards.id), "
        "(SELECT MAX(r.hour_ts) + 3599 FROM hourly_rollups r WHERE r.card_id = cards.id))"
    )


def downgrade() -> None:
    op.drop_index(OPEN, table_name="run_set_intervals")
    # A plain DROP COLUMN (SQLite 3.35 and later, PostgreSQL): a batch rebuild of `cards` would drop the table every
    # other table's rows refer to, which the foreign keys refuse once a card has rollups.
    op.execute("ALTER TABLE cards DROP COLUMN last_heard_ts")
    op.drop_index(BY_CARD, table_name="hourly_rollups")
    _rekey(("card_id", "hour_ts"))
