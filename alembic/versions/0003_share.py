"""sharing the fleet: groups, members, quotas and fair shares, daily usage

Revision ID: 0003_share
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpufleet.db.types

revision = '0003_share'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('groups',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('created_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_groups')),
    sa.UniqueConstraint('name', name=op.f('uq_groups_name'))
    )
    op.create_table('group_members',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('group_id', sa.Uuid(), nullable=False),
    sa.Column('user_id', sa.Uuid(), nullable=False),
    sa.ForeignKeyConstraint(['group_id'], ['groups.id'], name=op.f('fk_group_members_group_id_groups'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_group_members_user_id_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_group_members')),
    sa.UniqueConstraint('group_id', 'user_id', name=op.f('uq_group_members_group_id_user_id'))
    )
    op.create_index(op.f('ix_group_members_group_id'), 'group_members', ['group_id'], unique=False)
    op.create_index(op.f('ix_group_members_user_id'), 'group_members', ['user_id'], unique=False)
    op.create_table('quotas',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('user_id', sa.Uuid(), nullable=True),
    sa.Column('group_id', sa.Uuid(), nullable=True),
    sa.Column('max_gpus', sa.Integer(), nullable=True),
    sa.Column('gpu_hours_per_week', sa.Float(), nullable=True),
    sa.Column('share', sa.Float(), nullable=False),
    sa.CheckConstraint('(user_id IS NULL) <> (group_id IS NULL)', name=op.f('ck_quotas_one_subject')),
    sa.ForeignKeyConstraint(['group_id'], ['groups.id'], name=op.f('fk_quotas_group_id_groups'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_quotas_user_id_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_quotas')),
    sa.UniqueConstraint('group_id', name=op.f('uq_quotas_group_id')),
    sa.UniqueConstraint('user_id', name=op.f('uq_quotas_user_id'))
    )
    op.create_table('usage_daily',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('day', sa.Date(), nullable=False),
    sa.Column('training_id', sa.Uuid(), nullable=False),
    sa.Column('owner', sa.String(length=64), nullable=False),
    sa.Column('gpu_seconds_held', sa.Float(), nullable=False),
    sa.Column('gpu_seconds_used', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_usage_daily')),
    sa.UniqueConstraint('day', 'training_id', name=op.f('uq_usage_daily_day_training_id'))
    )
    op.create_index(op.f('ix_usage_daily_day'), 'usage_daily', ['day'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_usage_daily_day'), table_name='usage_daily')
    op.drop_table('usage_daily')
    op.drop_table('quotas')
    op.drop_index(op.f('ix_group_members_user_id'), table_name='group_members')
    op.drop_index(op.f('ix_group_members_group_id'), table_name='group_members')
    op.drop_table('group_members')
    op.drop_table('groups')
