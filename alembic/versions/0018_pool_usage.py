"""pool usage: when a pool job ran and on how many GPUs, from Slurm's own accounting

Revision ID: 0018_pool_usage
Revises: 0017_fleet_ops
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpufleet.db.types import UTCDateTime

revision = '0018_pool_usage'
down_revision = '0017_fleet_ops'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The usage report counts a pool's GPU-seconds from these: Slurm's start and end of the
    # job (its accounting's, once the job ended), and the GPUs it held.
    with op.batch_alter_table('pool_jobs') as batch:
        batch.add_column(sa.Column('run_start', UTCDateTime(), nullable=True))
        batch.add_column(sa.Column('run_end', UTCDateTime(), nullable=True))
        batch.add_column(sa.Column('gpus', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('accounted_by', sa.String(length=16), nullable=True))
    op.create_index(op.f('ix_pool_jobs_run_start'), 'pool_jobs', ['run_start'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_pool_jobs_run_start'), table_name='pool_jobs')
    with op.batch_alter_table('pool_jobs') as batch:
        batch.drop_column('accounted_by')
        batch.drop_column('gpus')
        batch.drop_column('run_end')
        batch.drop_column('run_start')
