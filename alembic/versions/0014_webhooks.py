"""users' webhooks, the deliveries owed to them, and the outbox's cursor over training_events

Revision ID: 0014_webhooks
Revises: 0012_fleet
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpufleet.db.types import JSONDoc, UTCDateTime

revision = '0014_webhooks'
down_revision = '0012_fleet'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'webhooks',
        sa.Column('id', sa.Uuid(), nullable=False),
        sa.Column('owner', sa.String(length=64), nullable=False),
        sa.Column('url', sa.Text(), nullable=False),
        sa.Column('format', sa.String(length=16), nullable=False),
        sa.Column('events', JSONDoc, nullable=False),
        sa.Column('secret', sa.String(length=128), nullable=False),
        sa.Column('enabled', sa.Boolean(), nullable=False),
        sa.Column('created_at', UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_webhooks')),
    )
    op.create_index(op.f('ix_webhooks_owner'), 'webhooks', ['owner'], unique=False)
    op.create_table(
        'webhook_deliveries',
        sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('webhook_id', sa.Uuid(), nullable=False),
        sa.Column('event_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
        sa.Column('event', sa.String(length=32), nullable=False),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('next_at', UTCDateTime(), nullable=False),
        sa.Column('delivered_at', UTCDateTime(), nullable=True),
        sa.Column('gave_up_at', UTCDateTime(), nullable=True),
        sa.Column('last_error', sa.Text(), nullable=True),
        sa.Column('created_at', UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(['event_id'], ['training_events.id'],
                                name=op.f('fk_webhook_deliveries_event_id_training_events'), ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['webhook_id'], ['webhooks.id'],
                                name=op.f('fk_webhook_deliveries_webhook_id_webhooks'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_webhook_deliveries')),
        sa.UniqueConstraint('webhook_id', 'event_id', name=op.f('uq_webhook_deliveries_webhook_id_event_id')),
    )
    op.create_index(op.f('ix_webhook_deliveries_event_id'), 'webhook_deliveries', ['event_id'], unique=False)
    op.create_index(op.f('ix_webhook_deliveries_next_at'), 'webhook_deliveries', ['next_at'], unique=False)
    op.create_table(
        'notify_cursor',
        sa.Column('name', sa.String(length=32), nullable=False),
        sa.Column('last_event_id', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('name', name=op.f('pk_notify_cursor')),
    )


def downgrade() -> None:
    op.drop_table('notify_cursor')
    op.drop_index(op.f('ix_webhook_deliveries_next_at'), table_name='webhook_deliveries')
    op.drop_index(op.f('ix_webhook_deliveries_event_id'), table_name='webhook_deliveries')
    op.drop_table('webhook_deliveries')
    op.drop_index(op.f('ix_webhooks_owner'), table_name='webhooks')
    op.drop_table('webhooks')
