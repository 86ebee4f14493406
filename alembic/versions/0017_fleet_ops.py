"""fleet operations: a host's lost worker, and the idempotency keys of creates

Revision ID: 0017_fleet_ops
Revises: 0016_pools
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpufleet.db.types import JSONDoc, UTCDateTime

revision = '0017_fleet_ops'
down_revision = '0016_pools'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A host whose worker was lost is no candidate until that worker beats again: the
    # agent's heartbeat (last_heartbeat) may stay fresh while no worker runs there.
    with op.batch_alter_table('hosts') as batch:
        batch.add_column(sa.Column('worker_seen_at', UTCDateTime(), nullable=True))
        batch.add_column(sa.Column('worker_lost_at', UTCDateTime(), nullable=True))
        batch.add_column(sa.Column('worker_lost_reason', sa.String(length=500), nullable=True))
    op.create_table(
        'idempotency_keys',
        sa.Column('id', sa.Uuid(), nullable=False),
        sa.Column('owner', sa.String(length=64), nullable=False),
        sa.Column('endpoint', sa.String(length=128), nullable=False),
        sa.Column('key', sa.String(length=255), nullable=False),
        sa.Column('fingerprint', sa.String(length=64), nullable=False),
        sa.Column('status_code', sa.Integer(), nullable=True),
        sa.Column('response', JSONDoc, nullable=True),
        sa.Column('created_at', UTCDateTime(), nullable=False),
        sa.Column('completed_at', UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_idempotency_keys')),
        sa.UniqueConstraint('owner', 'endpoint', 'key', name=op.f('uq_idempotency_keys_owner_endpoint_key')),
    )
    op.create_index(op.f('ix_idempotency_keys_created_at'), 'idempotency_keys', ['created_at'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_idempotency_keys_created_at'), table_name='idempotency_keys')
    op.drop_table('idempotency_keys')
    with op.batch_alter_table('hosts') as batch:
        batch.drop_column('worker_lost_reason')
        batch.drop_column('worker_lost_at')
        batch.drop_column('worker_seen_at')
