"""a training started from another's checkpoint: trainings.resumed_from

Revision ID: 0009_resume
Revises: 0010_context
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009_resume'
down_revision = '0010_context'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('trainings', schema=None) as batch_op:
        batch_op.add_column(sa.Column('resumed_from', sa.Uuid(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('trainings', schema=None) as batch_op:
        batch_op.drop_column('resumed_from')
