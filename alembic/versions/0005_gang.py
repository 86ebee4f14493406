"""trainings across hosts: the gang request, its members per host, the rendezvous

Revision ID: 0005_gang
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import gpufleet.db.types

revision = '0005_gang'
down_revision = '0004_preempt'
branch_labels = None
depends_on = None

JSONDoc = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')
IntList = sa.JSON().with_variant(postgresql.ARRAY(sa.Integer()), 'postgresql')


def upgrade() -> None:
    with op.batch_alter_table('trainings', schema=None) as batch_op:
        batch_op.add_column(sa.Column('gang', JSONDoc, nullable=True))
    op.create_table('gang_members',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('training_id', sa.Uuid(), nullable=False),
    sa.Column('host_id', sa.Uuid(), nullable=False),
    sa.Column('host_name', sa.String(length=255), nullable=False),
    sa.Column('node_rank', sa.Integer(), nullable=False),
    sa.Column('first_rank', sa.Integer(), nullable=False),
    sa.Column('gpu_ids', IntList, nullable=False),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=True),
    sa.Column('worker_id', sa.String(length=255), nullable=True),
    sa.Column('heartbeat_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=True),
    sa.Column('launcher_pid', sa.Integer(), nullable=True),
    sa.Column('message', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['host_id'], ['hosts.id'], name=op.f('fk_gang_members_host_id_hosts'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['training_id'], ['trainings.id'], name=op.f('fk_gang_members_training_id_trainings'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_gang_members')),
    sa.UniqueConstraint('training_id', 'host_id', name=op.f('uq_gang_members_training_id_host_id'))
    )
    with op.batch_alter_table('gang_members', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_gang_members_training_id'), ['training_id'], unique=False)
    op.create_table('gang_rendezvous',
    sa.Column('training_id', sa.Uuid(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('address', sa.String(length=255), nullable=False),
    sa.Column('port', sa.Integer(), nullable=False),
    sa.Column('marker', sa.String(length=64), nullable=False),
    sa.Column('published_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['training_id'], ['trainings.id'], name=op.f('fk_gang_rendezvous_training_id_trainings'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('training_id', name=op.f('pk_gang_rendezvous'))
    )


def downgrade() -> None:
    op.drop_table('gang_rendezvous')
    with op.batch_alter_table('gang_members', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_gang_members_training_id'))
    op.drop_table('gang_members')
    with op.batch_alter_table('trainings', schema=None) as batch_op:
        batch_op.drop_column('gang')
