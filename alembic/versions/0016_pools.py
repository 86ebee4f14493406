"""pools: the pools and pool_jobs tables, and trainings.pool

Revision ID: 0016_pools
Revises: 0015_queue_index
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpufleet.db.types import UTCDateTime

revision = '0016_pools'
down_revision = '0015_queue_index'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'pools',
        sa.Column('id', sa.Uuid(), nullable=False),
        sa.Column('name', sa.String(length=64), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('partition', sa.String(length=255), nullable=False),
        sa.Column('account', sa.String(length=255), nullable=True),
        sa.Column('gpus_per_node', sa.Integer(), nullable=True),
        sa.Column('gpu_model', sa.String(length=255), nullable=True),
        sa.Column('gpu_memory', sa.BigInteger(), nullable=True),
        sa.Column('checkpoint_root', sa.Text(), nullable=False),
        sa.Column('python', sa.Text(), nullable=False),
        sa.Column('created_at', UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_pools')),
        sa.UniqueConstraint('name', name=op.f('uq_pools_name')),
    )
    op.create_table(
        'pool_jobs',
        sa.Column('id', sa.Uuid(), nullable=False),
        sa.Column('training_id', sa.Uuid(), nullable=False),
        sa.Column('pool_id', sa.Uuid(), nullable=False),
        sa.Column('attempt', sa.Integer(), nullable=False),
        sa.Column('job_id', sa.String(length=64), nullable=False),
        sa.Column('account', sa.String(length=64), nullable=False),
        sa.Column('state', sa.String(length=32), nullable=False),
        sa.Column('reason', sa.Text(), nullable=True),
        sa.Column('nodes', sa.Text(), nullable=True),
        sa.Column('exit_code', sa.Integer(), nullable=True),
        sa.Column('output', sa.Text(), nullable=False),
        sa.Column('output_offset', sa.BigInteger(), nullable=False),
        sa.Column('submitted_at', UTCDateTime(timezone=True), nullable=False),
        sa.Column('ended_at', UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['training_id'], ['trainings.id'], name=op.f('fk_pool_jobs_training_id_trainings'),
                                ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['pool_id'], ['pools.id'], name=op.f('fk_pool_jobs_pool_id_pools'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_pool_jobs')),
        sa.UniqueConstraint('training_id', 'attempt', name=op.f('uq_pool_jobs_training_id_attempt')),
    )
    op.create_index(op.f('ix_pool_jobs_training_id'), 'pool_jobs', ['training_id'], unique=False)
    op.create_index(op.f('ix_pool_jobs_pool_id'), 'pool_jobs', ['pool_id'], unique=False)
    op.create_index(op.f('ix_pool_jobs_state'), 'pool_jobs', ['state'], unique=False)
    with op.batch_alter_table('trainings') as batch:
        batch.add_column(sa.Column('pool', sa.String(length=64), nullable=True))
        batch.create_index(batch.f('ix_trainings_pool'), ['pool'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('trainings') as batch:
        batch.drop_index(batch.f('ix_trainings_pool'))
        batch.drop_column('pool')
    op.drop_table('pool_jobs')
    op.drop_table('pools')
