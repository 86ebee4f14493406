"""sweeps: the sweeps and sweep_trials tables, and trainings.sweep_id

Revision ID: 0013_sweeps
Revises: 0011_sessions
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from gpufleet.db.types import UTCDateTime

revision = '0013_sweeps'
down_revision = '0011_sessions'
branch_labels = None
depends_on = None

JSONDoc = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')


def upgrade() -> None:
    op.create_table(
        'sweeps',
        sa.Column('id', sa.Uuid(), nullable=False),
        sa.Column('name', sa.String(length=255), nullable=False),
        sa.Column('owner', sa.String(length=64), nullable=False),
        sa.Column('admin', sa.Boolean(), nullable=False),
        sa.Column('status', sa.String(length=32), nullable=False),
        sa.Column('status_reason', sa.Text(), nullable=True),
        sa.Column('spec', JSONDoc, nullable=False),
        sa.Column('total_trials', sa.Integer(), nullable=False),
        sa.Column('study_name', sa.String(length=255), nullable=False),
        sa.Column('best_trial', sa.Integer(), nullable=True),
        sa.Column('created_at', UTCDateTime(timezone=True), nullable=False),
        sa.Column('finished_at', UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_sweeps')),
    )
    op.create_index(op.f('ix_sweeps_owner'), 'sweeps', ['owner'], unique=False)
    op.create_index(op.f('ix_sweeps_status'), 'sweeps', ['status'], unique=False)
    op.create_table(
        'sweep_trials',
        sa.Column('id', sa.Uuid(), nullable=False),
        sa.Column('sweep_id', sa.Uuid(), nullable=False),
        sa.Column('number', sa.Integer(), nullable=False),
        sa.Column('training_id', sa.Uuid(), nullable=True),
        sa.Column('params', JSONDoc, nullable=False),
        sa.Column('state', sa.String(length=16), nullable=False),
        sa.Column('rung', sa.Integer(), nullable=True),
        sa.Column('metric', sa.Float(), nullable=True),
        sa.Column('metric_step', sa.Integer(), nullable=True),
        sa.Column('oom_retried', sa.Boolean(), nullable=False),
        sa.Column('reason', sa.Text(), nullable=True),
        sa.Column('updated_at', UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['sweep_id'], ['sweeps.id'], name=op.f('fk_sweep_trials_sweep_id_sweeps'),
                                ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['training_id'], ['trainings.id'],
                                name=op.f('fk_sweep_trials_training_id_trainings'), ondelete='SET NULL'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_sweep_trials')),
        sa.UniqueConstraint('sweep_id', 'number', name=op.f('uq_sweep_trials_sweep_id_number')),
    )
    op.create_index(op.f('ix_sweep_trials_sweep_id'), 'sweep_trials', ['sweep_id'], unique=False)
    with op.batch_alter_table('trainings', schema=None) as batch_op:
        batch_op.add_column(sa.Column('sweep_id', sa.Uuid(), nullable=True))
        batch_op.create_index(batch_op.f('ix_trainings_sweep_id'), ['sweep_id'], unique=False)
        batch_op.create_foreign_key(batch_op.f('fk_trainings_sweep_id_sweeps'), 'sweeps', ['sweep_id'], ['id'],
                                    ondelete='SET NULL')


def downgrade() -> None:
    with op.batch_alter_table('trainings', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_trainings_sweep_id_sweeps'), type_='foreignkey')
        batch_op.drop_index(batch_op.f('ix_trainings_sweep_id'))
        batch_op.drop_column('sweep_id')
    op.drop_index(op.f('ix_sweep_trials_sweep_id'), table_name='sweep_trials')
    op.drop_table('sweep_trials')
    op.drop_index(op.f('ix_sweeps_status'), table_name='sweeps')
    op.drop_index(op.f('ix_sweeps_owner'), table_name='sweeps')
    op.drop_table('sweeps')
