"""The service's journal acts once and its hours are billed once.

Revision ID: 0003
Revises: 0002

Decisions get a deterministic `decision_key` (unique, so journaling an hour again
after a crash adds nothing) and `acted_ts` (NULL until the actuator carried the
decision out, so a restart acts on exactly the journaled-but-not-acted ones).
Scores are read by hour, so they get an index on (hour_ts, window_hours).
`service_hours` holds one row per decided and billed month hour: demand,
capacity, delivered, the bill's parts, idle cost and the ideal bill.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("decisions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("decision_key", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("acted_ts", sa.Integer(), nullable=True))
        batch_op.create_unique_constraint(batch_op.f("uq_decisions_decision_key"), ["decision_key"])
        batch_op.create_index("ix_decisions_card_ts", ["card_id", "ts"], unique=False)
    with op.batch_alter_table("scores", schema=None) as batch_op:
        batch_op.create_index("ix_scores_hour_window", ["hour_ts", "window_hours"], unique=False)
    op.create_table(
        "service_hours",
        sa.Column("hour_ts", sa.Integer(), nullable=False),
        sa.Column("month_start_ts", sa.Integer(), nullable=False),
        sa.Column("demand_tps", sa.Float(), nullable=False),
        sa.Column("capacity_tps", sa.Float(), nullable=False),
        sa.Column("delivered_tps", sa.Float(), nullable=False),
        sa.Column("scored_capacity_tps", sa.Float(), nullable=False),
        sa.Column("cards_warm", sa.Integer(), nullable=False),
        sa.Column("warm_usd", sa.Float(), nullable=False),
        sa.Column("churn_usd", sa.Float(), nullable=False),
        sa.Column("idle_usd", sa.Float(), nullable=False),
        sa.Column("ideal_usd", sa.Float(), nullable=False),
        sa.Column("evictions", sa.Integer(), nullable=False),
        sa.Column("wrong_evictions", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("hour_ts", name=op.f("pk_service_hours")),
    )
    with op.batch_alter_table("service_hours", schema=None) as batch_op:
        batch_op.create_index("ix_service_hours_month", ["month_start_ts"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("service_hours", schema=None) as batch_op:
        batch_op.drop_index("ix_service_hours_month")
    op.drop_table("service_hours")
    with op.batch_alter_table("scores", schema=None) as batch_op:
        batch_op.drop_index("ix_scores_hour_window")
    with op.batch_alter_table("decisions", schema=None) as batch_op:
        batch_op.drop_index("ix_decisions_card_ts")
        batch_op.drop_constraint(batch_op.f("uq_decisions_decision_key"), type_="unique")
        batch_op.drop_column("acted_ts")
        batch_op.drop_column("decision_key")
