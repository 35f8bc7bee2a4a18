"""The journal indexed by kind, each card's last sample with tokens kept on the card, and the open mismatches kept.

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

The open mismatches (seen, not cleared since) were a fold over every reconcile record ever journaled, every tick and
every `/metrics` collection. `reconcile_open` keeps them, written with the records; it is filled here by the same
fold over the records already journaled.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

TIMESTAMP = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
BY_KIND = "ix_decisions_kind_ts"


def _open_mismatches() -> list[dict]:
    """The fold `fleet.service.reconcile.open_mismatches` made: in the order written, a `seen` record opens its
    (card, mismatch), a `cleared` one closes it."""
    rows = op.get_bind().execute(sa.text("SELECT id, card_id, detail_json FROM decisions WHERE kind = 'reconcile' "
                                         "AND card_id IS NOT NULL ORDER BY id")).all()
    open_: dict[tuple[int, str], int] = {}
    for decision_id, card_id, detail in rows:
        record = json.loads(detail or "{}")
        key = (int(card_id), record.get("mismatch"))
        if key[1] is None:
            continue
        if record.get("state") == "seen":
            open_[key] = int(decision_id)
        else:
            open_.pop(key, None)
    return [{"c": c, "m": m, "d": d} for (c, m), d in sorted(open_.items())]


def upgrade() -> None:
    op.create_index(BY_KIND, "decisions", ["kind", "ts"], unique=False)
    op.create_table(
        "reconcile_open",
        sa.Column("card_id", sa.Integer(), nullable=False),
        sa.Column("mismatch", sa.String(length=40), nullable=False),
        sa.Column("decision_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["card_id"], ["cards.id"], name=op.f("fk_reconcile_open_card_id_cards")),
        sa.ForeignKeyConstraint(["decision_id"], ["decisions.id"], name=op.f("fk_reconcile_open_decision_id_decisions")),
        sa.PrimaryKeyConstraint("card_id", "mismatch", name=op.f("pk_reconcile_open")),
    )
    found = _open_mismatches()
    if found:
        op.get_bind().execute(sa.text("INSERT INTO reconcile_open (card_id, mismatch, decision_id) VALUES (:c, :m, :d)"), found)
    with op.batch_alter_table("cards") as batch:
        batch.add_column(sa.Column("last_served_ts", TIMESTAMP, nullable=True))
    op.execute(
        "UPDATE cards SET last_served_ts = "
        "(SELECT MAX(s.ts) FROM telemetry_samples s WHERE s.card_id = cards.id AND s.tokens_per_s > 0)"
    )


def downgrade() -> None:
    op.drop_table("reconcile_open")
    # A plain DROP COLUMN, as 0008's downgrade: a batch rebuild of `cards` is refused by the rows that refer to it.
    op.execute("ALTER TABLE cards DROP COLUMN last_served_ts")
    op.drop_index(BY_KIND, table_name="decisions")
