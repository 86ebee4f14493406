"""booking limits: what a user's or a group's bookings may hold (hours a week, GPUs at once, longest, furthest ahead)

Revision ID: 0022_booking_limits
Revises: 0021_booking_feeds
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0022_booking_limits'
down_revision = '0021_booking_feeds'
branch_labels = None
depends_on = None

COLUMNS = (('booking_hours_per_week', sa.Float()), ('booking_max_gpus', sa.Integer()),
           ('booking_max_hours', sa.Float()), ('booking_max_ahead_days', sa.Float()))


def upgrade() -> None:
    # Nullable columns: every quota so far keeps the server's defaults (a user) or no limit (a group).
    for name, kind in COLUMNS:
        op.add_column('quotas', sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    # SQLite's own DROP COLUMN (3.35+), as 0019 does: a batch copy of the table is not needed for a plain column.
    for name, _kind in reversed(COLUMNS):
        op.drop_column('quotas', name)
