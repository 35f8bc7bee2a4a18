"""initial schema

Revision ID: 0001
Revises: 
The first schema: classes, cards, samples keyed (card_id, ts), hourly rollups,
scores, run-set intervals, the decision journal, bills, quarantine, ingest runs
and batches.
"""

from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('card_classes',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('rated_tps', sa.Float(), nullable=True),
    sa.Column('rent_usd_per_month', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_card_classes')),
    sa.UniqueConstraint('name', name=op.f('uq_card_classes_name'))
    )
    op.create_table('ingest_runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('source', sa.Text(), nullable=False),
    sa.Column('source_digest', sa.String(length=64), nullable=False),
    sa.Column('started_ts', sa.Integer(), nullable=False),
    sa.Column('finished_ts', sa.Integer(), nullable=True),
    sa.Column('read', sa.Integer(), nullable=False),
    sa.Column('stored', sa.Integer(), nullable=False),
    sa.Column('duplicates', sa.Integer(), nullable=False),
    sa.Column('quarantined', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_ingest_runs'))
    )
    op.create_table('cards',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('card_key', sa.String(length=200), nullable=False),
    sa.Column('class_id', sa.Integer(), nullable=False),
    sa.Column('registered_ts', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['class_id'], ['card_classes.id'], name=op.f('fk_cards_class_id_card_classes')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_cards')),
    sa.UniqueConstraint('card_key', name=op.f('uq_cards_card_key'))
    )
    op.create_table('ingest_batches',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('part', sa.Integer(), nullable=False),
    sa.Column('first_record', sa.Integer(), nullable=False),
    sa.Column('read', sa.Integer(), nullable=False),
    sa.Column('stored', sa.Integer(), nullable=False),
    sa.Column('duplicates', sa.Integer(), nullable=False),
    sa.Column('quarantined', sa.Integer(), nullable=False),
    sa.Column('committed_ts', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['ingest_runs.id'], name=op.f('fk_ingest_batches_run_id_ingest_runs')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_ingest_batches')),
    sa.UniqueConstraint('run_id', 'part', name=op.f('uq_ingest_batches_run_id'))
    )
    op.create_table('bills',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('card_id', sa.Integer(), nullable=True),
    sa.Column('period_start_ts', sa.Integer(), nullable=False),
    sa.Column('period_end_ts', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=20), nullable=False),
    sa.Column('usd', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['card_id'], ['cards.id'], name=op.f('fk_bills_card_id_cards')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_bills'))
    )
    with op.batch_alter_table('bills', schema=None) as batch_op:
        batch_op.create_index('ix_bills_period', ['period_start_ts'], unique=False)

    op.create_table('decisions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('ts', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=40), nullable=False),
    sa.Column('card_id', sa.Integer(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('detail_json', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['card_id'], ['cards.id'], name=op.f('fk_decisions_card_id_cards')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_decisions'))
    )
    with op.batch_alter_table('decisions', schema=None) as batch_op:
        batch_op.create_index('ix_decisions_ts', ['ts'], unique=False)

    op.create_table('hourly_rollups',
    sa.Column('card_id', sa.Integer(), nullable=False),
    sa.Column('hour_ts', sa.Integer(), nullable=False),
    sa.Column('sample_count', sa.Integer(), nullable=False),
    sa.Column('tokens_per_s_sum', sa.Float(), nullable=False),
    sa.Column('busy_count', sa.Integer(), nullable=False),
    sa.Column('busy_fraction_sum', sa.Float(), nullable=False),
    sa.Column('busy_tokens_per_s_sum', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['card_id'], ['cards.id'], name=op.f('fk_hourly_rollups_card_id_cards')),
    sa.PrimaryKeyConstraint('card_id', 'hour_ts', name=op.f('pk_hourly_rollups')),
    sqlite_with_rowid=False
    )
    op.create_table('quarantined_input',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('batch_id', sa.Integer(), nullable=False),
    sa.Column('source', sa.Text(), nullable=False),
    sa.Column('source_digest', sa.String(length=64), nullable=False),
    sa.Column('record_no', sa.Integer(), nullable=False),
    sa.Column('raw_text', sa.Text(), nullable=False),
    sa.Column('reason', sa.String(length=80), nullable=False),
    sa.ForeignKeyConstraint(['batch_id'], ['ingest_batches.id'], name=op.f('fk_quarantined_input_batch_id_ingest_batches')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_quarantined_input')),
    sa.UniqueConstraint('source_digest', 'record_no', name=op.f('uq_quarantined_input_source_digest'))
    )
    op.create_table('run_set_intervals',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('card_id', sa.Integer(), nullable=False),
    sa.Column('start_ts', sa.Integer(), nullable=False),
    sa.Column('end_ts', sa.Integer(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['card_id'], ['cards.id'], name=op.f('fk_run_set_intervals_card_id_cards')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_run_set_intervals'))
    )
    with op.batch_alter_table('run_set_intervals', schema=None) as batch_op:
        batch_op.create_index('ix_run_set_intervals_card_start', ['card_id', 'start_ts'], unique=False)

    op.create_table('scores',
    sa.Column('card_id', sa.Integer(), nullable=False),
    sa.Column('hour_ts', sa.Integer(), nullable=False),
    sa.Column('window_hours', sa.Integer(), nullable=False),
    sa.Column('score_tps', sa.Float(), nullable=False),
    sa.Column('tokens_per_usd', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['card_id'], ['cards.id'], name=op.f('fk_scores_card_id_cards')),
    sa.PrimaryKeyConstraint('card_id', 'hour_ts', 'window_hours', name=op.f('pk_scores')),
    sqlite_with_rowid=False
    )
    op.create_table('telemetry_samples',
    sa.Column('card_id', sa.Integer(), nullable=False),
    sa.Column('ts', sa.Integer(), nullable=False),
    sa.Column('tokens_per_s', sa.Float(), nullable=False),
    sa.Column('busy_fraction', sa.Float(), nullable=True),
    sa.Column('batch_id', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['batch_id'], ['ingest_batches.id'], name=op.f('fk_telemetry_samples_batch_id_ingest_batches')),
    sa.ForeignKeyConstraint(['card_id'], ['cards.id'], name=op.f('fk_telemetry_samples_card_id_cards')),
    sa.PrimaryKeyConstraint('card_id', 'ts', name=op.f('pk_telemetry_samples')),
    sqlite_with_rowid=False
    )


def downgrade() -> None:
    op.drop_table('telemetry_samples')
    op.drop_table('scores')
    with op.batch_alter_table('run_set_intervals', schema=None) as batch_op:
        batch_op.drop_index('ix_run_set_intervals_card_start')

    op.drop_table('run_set_intervals')
    op.drop_table('quarantined_input')
    op.drop_table('hourly_rollups')
    with op.batch_alter_table('decisions', schema=None) as batch_op:
        batch_op.drop_index('ix_decisions_ts')

    op.drop_table('decisions')
    with op.batch_alter_table('bills', schema=None) as batch_op:
        batch_op.drop_index('ix_bills_period')

    op.drop_table('bills')
    op.drop_table('ingest_batches')
    op.drop_table('cards')
    op.drop_table('ingest_runs')
    op.drop_table('card_classes')
