"""rungs: a sweep trial's rung steps, the newest one it was let past, and how a cancel ends it (pruned)

Revision ID: 0018_rungs
Revises: 0018_pool_usage
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0018_rungs'
down_revision = '0018_pool_usage'
branch_labels = None
depends_on = None

JSONDoc = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')


def upgrade() -> None:
    # A trial's ranks wait at each of its rung steps until the sweep's driver lets them past
    # (passed_rung_step) or stops them; a stop by the driver ends the training as cancel_as
    # ('pruned', a training status of its own) instead of 'cancelled'.
    with op.batch_alter_table('trainings') as batch:
        batch.add_column(sa.Column('rung_steps', JSONDoc, nullable=True))
        batch.add_column(sa.Column('passed_rung_step', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('cancel_as', sa.String(length=32), nullable=True))


def downgrade() -> None:
    op.execute("UPDATE trainings SET status = 'cancelled' WHERE status = 'pruned'")
    with op.batch_alter_table('trainings') as batch:
        batch.drop_column('cancel_as')
        batch.drop_column('passed_rung_step')
        batch.drop_column('rung_steps')
