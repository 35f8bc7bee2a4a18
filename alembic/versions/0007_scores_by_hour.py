"""Scores kept in hour order: the key of `scores` becomes (hour_ts, window_hours, card_id); unacted decisions indexed.

Revision ID: 0007
Revises: 0006

Every hour the score job writes one row per card and window, all for the same new hour. Keyed by card first, those
rows land at the end of every card's stretch of the table, so an hour's write touched a page per card and window.
Keyed by hour first, an hour's rows are appended together. Every read of scores asks for an hour (and a window), which the new key serves, so the index on
(hour_ts, window_hours) goes. On SQLite the table is rebuilt (a key cannot be altered); on PostgreSQL the key
constraint is replaced.

Each acting pass asks for the decisions not yet acted on; the journal grows by every hour's records, and the ask
read all of it, a little more each hour. A partial index of the unacted decisions' ids answers
it from the few that are.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TIMESTAMP = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
COLUMNS = "card_id, hour_ts, window_hours, score_tps, tokens_per_usd"


def _rebuild_sqlite(key: tuple[str, ...]) -> None:
    op.create_table(
        "scores_rekeyed",
        sa.Column("card_id", sa.Integer(), nullable=False),
        sa.Column("hour_ts", TIMESTAMP, nullable=False),
        sa.Column("window_hours", sa.Integer(), nullable=False),
        sa.Column("score_tps", sa.Float(), nullable=False),
        sa.Column("tokens_per_usd", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["card_id"], ["cards.id"], name=op.f("fk_scores_card_id_cards")),
        sa.PrimaryKeyConstraint(*key, name=op.f("pk_scores")),
        sqlite_with_rowid=False,
    )
    op.execute(f"INSERT INTO scores_rekeyed ({COLUMNS}) SELECT {COLUMNS} FROM scores")
    op.drop_table("scores")
    op.rename_table("scores_rekeyed", "scores")


UNACTED = sa.text("acted_ts IS NULL")


def upgrade() -> None:
    op.create_index("ix_decisions_unacted", "decisions", ["id"], unique=False, sqlite_where=UNACTED,
                    postgresql_where=UNACTED)
    op.drop_index("ix_scores_hour_window", table_name="scores")
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite(("hour_ts", "window_hours", "card_id"))
    else:
        op.drop_constraint(op.f("pk_scores"), "scores", type_="primary")
        op.create_primary_key(op.f("pk_scores"), "scores", ["hour_ts", "window_hours", "card_id"])


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite(("card_id", "hour_ts", "window_hours"))
    else:
        op.drop_constraint(op.f("pk_scores"), "scores", type_="primary")
        op.create_primary_key(op.f("pk_scores"), "scores", ["card_id", "hour_ts", "window_hours"])
    op.create_index("ix_scores_hour_window", "scores", ["hour_ts", "window_hours"], unique=False)
    op.drop_index("ix_decisions_unacted", table_name="decisions")
