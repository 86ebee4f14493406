"""a training's log shipped by every host: training_log_chunks

Revision ID: 0012_fleet
Revises: 0009_resume
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpufleet.db.types import UTCDateTime

revision = '0012_fleet'
down_revision = '0009_resume'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'training_log_chunks',
        sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('training_id', sa.Uuid(), nullable=False),
        sa.Column('source', sa.String(length=300), nullable=False),
        sa.Column('source_end', sa.BigInteger(), nullable=False),
        sa.Column('start', sa.BigInteger(), nullable=False),
        sa.Column('stop', sa.BigInteger(), nullable=False),
        sa.Column('data', sa.LargeBinary(), nullable=False),
        sa.Column('time', UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['training_id'], ['trainings.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('training_id', 'source', 'source_end'),
    )
    op.create_index('ix_training_log_chunks_stream', 'training_log_chunks', ['training_id', 'start'])


def downgrade() -> None:
    op.drop_index('ix_training_log_chunks_stream', table_name='training_log_chunks')
    op.drop_table('training_log_chunks')
