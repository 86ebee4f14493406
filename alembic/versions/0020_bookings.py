"""bookings: GPUs held for an owner or for maintenance over a window, never two on one GPU at once

Revision ID: 0020_bookings
Revises: 0019_place_options
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpufleet.db.types import UTCDateTime

revision = '0020_bookings'
down_revision = '0019_place_options'
branch_labels = None
depends_on = None

# SQLite has no exclusion constraint: a trigger refuses the overlapping row inside the writer's transaction
# (the same words as PostgreSQL's constraint name, which is how gpufleet.bookings knows a conflict).
_OVERLAP = """
    WHEN NEW.start_at < NEW.end_at AND EXISTS (
        SELECT 1 FROM booking_gpus b WHERE b.gpu_id = NEW.gpu_id AND b.id != NEW.id
        AND b.start_at < b.end_at AND b.start_at < NEW.end_at AND NEW.start_at < b.end_at)
    BEGIN SELECT RAISE(ABORT, 'booking_gpus_no_overlap'); END
"""


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == 'sqlite'
    op.create_table(
        'bookings',
        sa.Column('id', sa.Uuid(), nullable=False),
        sa.Column('owner', sa.String(length=64), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('start_at', UTCDateTime(), nullable=False),
        sa.Column('end_at', UTCDateTime(), nullable=False),
        sa.Column('gpu_count', sa.Integer(), nullable=False),
        sa.Column('gpu_model', sa.String(length=255), nullable=True),
        sa.Column('host_id', sa.Uuid(), nullable=True),
        sa.Column('reason', sa.Text(), nullable=True),
        sa.Column('time_zone', sa.String(length=64), nullable=False),
        sa.Column('created_by', sa.String(length=64), nullable=False),
        sa.Column('created_at', UTCDateTime(), nullable=False),
        sa.Column('released_at', UTCDateTime(), nullable=True),
        sa.Column('release_reason', sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(['host_id'], ['hosts.id'], name=op.f('fk_bookings_host_id_hosts'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_bookings')),
    )
    op.create_index(op.f('ix_bookings_owner'), 'bookings', ['owner'], unique=False)
    op.create_index(op.f('ix_bookings_end_at'), 'bookings', ['end_at'], unique=False)
    if not sqlite:
        op.execute('CREATE EXTENSION IF NOT EXISTS btree_gist')
    op.create_table(
        'booking_gpus',
        sa.Column('id', sa.Uuid(), nullable=False),
        sa.Column('booking_id', sa.Uuid(), nullable=False),
        sa.Column('gpu_id', sa.Uuid(), nullable=False),
        sa.Column('host_id', sa.Uuid(), nullable=False),
        sa.Column('gpu_index', sa.Integer(), nullable=False),
        sa.Column('start_at', UTCDateTime(), nullable=False),
        sa.Column('end_at', UTCDateTime(), nullable=False),
        sa.CheckConstraint('end_at >= start_at', name=op.f('ck_booking_gpus_window_forward')),
        sa.ForeignKeyConstraint(['booking_id'], ['bookings.id'], name=op.f('fk_booking_gpus_booking_id_bookings'),
                                ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['gpu_id'], ['gpus.id'], name=op.f('fk_booking_gpus_gpu_id_gpus'), ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['host_id'], ['hosts.id'], name=op.f('fk_booking_gpus_host_id_hosts'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_booking_gpus')),
    )
    op.create_index(op.f('ix_booking_gpus_booking_id'), 'booking_gpus', ['booking_id'], unique=False)
    op.create_index('ix_booking_gpus_gpu_end', 'booking_gpus', ['gpu_id', 'end_at'], unique=False)
    if sqlite:
        op.execute(f'CREATE TRIGGER booking_gpus_no_overlap BEFORE INSERT ON booking_gpus {_OVERLAP}')
        op.execute(f'CREATE TRIGGER booking_gpus_no_overlap_update BEFORE UPDATE OF gpu_id, start_at, end_at '
                   f'ON booking_gpus {_OVERLAP}')
    else:
        op.execute('ALTER TABLE booking_gpus ADD CONSTRAINT booking_gpus_no_overlap '
                   'EXCLUDE USING gist (gpu_id WITH =, tstzrange(start_at, end_at) WITH &&)')


def downgrade() -> None:
    if op.get_bind().dialect.name == 'sqlite':
        op.execute('DROP TRIGGER IF EXISTS booking_gpus_no_overlap_update')
        op.execute('DROP TRIGGER IF EXISTS booking_gpus_no_overlap')
    op.drop_index('ix_booking_gpus_gpu_end', table_name='booking_gpus')
    op.drop_index(op.f('ix_booking_gpus_booking_id'), table_name='booking_gpus')
    op.drop_table('booking_gpus')  # (its exclusion constraint goes with it; btree_gist stays, others may use it)
    op.drop_index(op.f('ix_bookings_end_at'), table_name='bookings')
    op.drop_index(op.f('ix_bookings_owner'), table_name='bookings')
    op.drop_table('bookings')
