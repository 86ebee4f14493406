"""users.unix_account: the Unix account an admin mapped a user's trainings to

Revision ID: 0007_runas
Revises: 0006_sessions_priority
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007_runas'
down_revision = '0006_sessions_priority'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.add_column(sa.Column('unix_account', sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.drop_column('unix_account')
