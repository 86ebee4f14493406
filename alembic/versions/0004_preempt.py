"""sharing the fleet: preemptible trainings, preemption requests, max runtime, idle tracking and reclaim

Revision ID: 0004_preempt
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpufleet.db.types

revision = '0004_preempt'
down_revision = '0003_share'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('trainings', schema=None) as batch_op:
        batch_op.add_column(sa.Column('preemptible', sa.Boolean(), server_default=sa.text('true'), nullable=False))
        batch_op.add_column(sa.Column('preempted_by', sa.Uuid(), nullable=True))
        batch_op.add_column(sa.Column('max_runtime_s', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('idle_since', gpufleet.db.types.UTCDateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('idle_warned_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('reclaim_requested', sa.Boolean(), server_default=sa.text('false'), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('trainings', schema=None) as batch_op:
        batch_op.drop_column('reclaim_requested')
        batch_op.drop_column('idle_warned_at')
        batch_op.drop_column('idle_since')
        batch_op.drop_column('max_runtime_s')
        batch_op.drop_column('preempted_by')
        batch_op.drop_column('preemptible')
