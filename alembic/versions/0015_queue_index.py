"""queue index: the queued trainings in the scheduler's order (priority highest first, then age)

Revision ID: 0015_queue_index
Revises: 0013_sweeps
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0015_queue_index'
down_revision = '0013_sweeps'
branch_labels = None
depends_on = None

_QUEUED = sa.text("status = 'queued'")


def upgrade() -> None:
    # The scheduler reads the queue ordered by priority DESC, created_at, id every pass; the
    # older (status, priority, created_at) index cannot give that order, so each read sorted
    # the whole queue. Partial: only queued rows, so it stays as small as the queue.
    op.create_index('ix_trainings_queue', 'trainings',
                    [sa.literal_column('priority DESC'), 'created_at', 'id'], unique=False,
                    postgresql_where=_QUEUED, sqlite_where=_QUEUED)


def downgrade() -> None:
    op.drop_index('ix_trainings_queue', table_name='trainings')
