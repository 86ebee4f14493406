"""interactive sessions: training_sessions (a session's side of its trainings row) and session_limits

Revision ID: 0011_sessions
Revises: 0014_webhooks
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpufleet.db.types

revision = '0011_sessions'
down_revision = '0014_webhooks'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'training_sessions',
        sa.Column('training_id', sa.Uuid(), nullable=False),
        sa.Column('jupyter', sa.Boolean(), nullable=False),
        sa.Column('hours', sa.Float(), nullable=False),
        sa.Column('port', sa.Integer(), nullable=True),
        sa.Column('token', sa.String(length=128), nullable=True),
        sa.Column('ready_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column('active_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column('idle_warned_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column('stop_reason', sa.String(length=16), nullable=True),
        sa.Column('stopped_by', sa.String(length=64), nullable=True),
        sa.Column('ended_recorded', sa.Boolean(), nullable=False),
        sa.Column('created_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['training_id'], ['trainings.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('training_id'),
    )
    op.create_table(
        'session_limits',
        sa.Column('id', sa.Uuid(), nullable=False),
        sa.Column('subject_kind', sa.String(length=8), nullable=False),
        sa.Column('subject', sa.String(length=64), nullable=False),
        sa.Column('max_hours', sa.Float(), nullable=False),
        sa.Column('set_by', sa.String(length=64), nullable=True),
        sa.Column('updated_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.CheckConstraint("subject_kind in ('user', 'group')", name='ck_session_limits_kind'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('subject_kind', 'subject'),
    )


def downgrade() -> None:
    op.drop_table('session_limits')
    op.drop_table('training_sessions')
