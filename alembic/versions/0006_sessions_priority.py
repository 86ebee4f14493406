"""browser sessions as rows; priority caps per user or group; the non_preemptible permission

Revision ID: 0006_sessions_priority
Revises: 0005_gang
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpufleet.db.types

revision = '0006_sessions_priority'
down_revision = '0005_gang'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('browser_sessions',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('user_id', sa.Uuid(), nullable=False),
    sa.Column('token_id', sa.Uuid(), nullable=True),
    sa.Column('key_hash', sa.String(length=64), nullable=False),
    sa.Column('created_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('expires_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('revoked_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['token_id'], ['api_tokens.id'], name=op.f('fk_browser_sessions_token_id_api_tokens'),
                            ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_browser_sessions_user_id_users'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_browser_sessions'))
    )
    with op.batch_alter_table('browser_sessions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_browser_sessions_token_id'), ['token_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_browser_sessions_user_id'), ['user_id'], unique=False)
    with op.batch_alter_table('quotas', schema=None) as batch_op:
        batch_op.add_column(sa.Column('max_priority', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('max_priority_set_by', sa.String(length=128), nullable=True))
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.add_column(sa.Column('non_preemptible', sa.Boolean(), server_default=sa.text('false'),
                                      nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.drop_column('non_preemptible')
    with op.batch_alter_table('quotas', schema=None) as batch_op:
        batch_op.drop_column('max_priority_set_by')
        batch_op.drop_column('max_priority')
    with op.batch_alter_table('browser_sessions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_browser_sessions_user_id'))
        batch_op.drop_index(batch_op.f('ix_browser_sessions_token_id'))
    op.drop_table('browser_sessions')
