"""booking events: what a booking's owner is told of (it starts soon, it was released), sent by webhooks

Revision ID: 0023_booking_events
Revises: 0022_booking_limits
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpufleet.db.types import UTCDateTime

revision = '0023_booking_events'
down_revision = '0022_booking_limits'
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')


def upgrade() -> None:
    op.create_table(
        'booking_events',
        sa.Column('id', _ID, autoincrement=True, nullable=False),
        sa.Column('booking_id', sa.Uuid(), nullable=False),
        sa.Column('owner', sa.String(length=64), nullable=False),
        sa.Column('kind', sa.String(length=32), nullable=False),
        sa.Column('time', UTCDateTime(), nullable=False),
        sa.Column('reason', sa.Text(), nullable=True),
        sa.Column('user', sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(['booking_id'], ['bookings.id'], name=op.f('fk_booking_events_booking_id_bookings'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_booking_events')),
        sa.UniqueConstraint('booking_id', 'kind', name=op.f('uq_booking_events_booking_id_kind')),
    )
    op.create_index(op.f('ix_booking_events_time'), 'booking_events', ['time'], unique=False)
    # A delivery is now of a training's event or a booking's: event_id may be null, and exactly one is set.
    # A batch: SQLite changes a column's nullability and adds a check only by copying the table.
    with op.batch_alter_table('webhook_deliveries') as batch:
        batch.alter_column('event_id', existing_type=_ID, nullable=True)
        batch.add_column(sa.Column('booking_event_id', _ID, nullable=True))
        batch.create_foreign_key(op.f('fk_webhook_deliveries_booking_event_id_booking_events'), 'booking_events',
                                 ['booking_event_id'], ['id'], ondelete='CASCADE')
        batch.create_unique_constraint(op.f('uq_webhook_deliveries_webhook_id_booking_event_id'),
                                       ['webhook_id', 'booking_event_id'])
        batch.create_check_constraint(op.f('ck_webhook_deliveries_one_event'),
                                      sa.text('(event_id IS NULL) <> (booking_event_id IS NULL)'))
        batch.create_index(op.f('ix_webhook_deliveries_booking_event_id'), ['booking_event_id'], unique=False)


def downgrade() -> None:
    # A booking's deliveries have no training event to stand on: they go with the column.
    op.execute('DELETE FROM webhook_deliveries WHERE event_id IS NULL')
    with op.batch_alter_table('webhook_deliveries') as batch:
        batch.drop_index(op.f('ix_webhook_deliveries_booking_event_id'))
        batch.drop_constraint(op.f('ck_webhook_deliveries_one_event'), type_='check')
        batch.drop_constraint(op.f('uq_webhook_deliveries_webhook_id_booking_event_id'), type_='unique')
        batch.drop_constraint(op.f('fk_webhook_deliveries_booking_event_id_booking_events'), type_='foreignkey')
        batch.drop_column('booking_event_id')
        batch.alter_column('event_id', existing_type=_ID, nullable=False)
    op.drop_index(op.f('ix_booking_events_time'), table_name='booking_events')
    op.drop_table('booking_events')
