"""booking feeds: secret iCalendar feed addresses of one's own or a team's bookings (only the token's hash)

Revision ID: 0021_booking_feeds
Revises: 0020_bookings
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpufleet.db.types import UTCDateTime

revision = '0021_booking_feeds'
down_revision = '0020_bookings'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'booking_feeds',
        sa.Column('id', sa.Uuid(), nullable=False),
        sa.Column('owner', sa.String(length=64), nullable=False),
        sa.Column('group_name', sa.String(length=64), nullable=False),
        sa.Column('token_hash', sa.String(length=64), nullable=False),
        sa.Column('created_at', UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('token_hash'),
    )
    op.create_index('ix_booking_feeds_owner_group', 'booking_feeds', ['owner', 'group_name'], unique=True)


def downgrade() -> None:
    op.drop_index('ix_booking_feeds_owner_group', table_name='booking_feeds')
    op.drop_table('booking_feeds')
