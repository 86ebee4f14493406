"""script trainings: code blobs, training kind/code/argv/env, declared memory, run_code permission

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import gpufleet.db.types

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('code_blobs',
    sa.Column('hash', sa.String(length=64), nullable=False),
    sa.Column('size', sa.BigInteger(), nullable=False),
    sa.Column('unpacked_size', sa.BigInteger(), nullable=False),
    sa.Column('files', sa.Integer(), nullable=False),
    sa.Column('content', sa.LargeBinary(), nullable=False),
    sa.Column('created_by', sa.String(length=64), nullable=False),
    sa.Column('created_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('hash', name=op.f('pk_code_blobs'))
    )
    with op.batch_alter_table('trainings', schema=None) as batch_op:
        batch_op.add_column(sa.Column('kind', sa.String(length=16), server_default=sa.text("'recipe'"), nullable=False))
        batch_op.add_column(sa.Column('code_hash', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('argv', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True))
        batch_op.add_column(sa.Column('env', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True))
        batch_op.add_column(sa.Column('memory_declared', sa.BigInteger(), nullable=True))
        batch_op.create_index(batch_op.f('ix_trainings_code_hash'), ['code_hash'], unique=False)
        batch_op.create_foreign_key(batch_op.f('fk_trainings_code_hash_code_blobs'), 'code_blobs', ['code_hash'], ['hash'])
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.add_column(sa.Column('run_code', sa.Boolean(), server_default=sa.text('false'), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.drop_column('run_code')
    with op.batch_alter_table('trainings', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_trainings_code_hash_code_blobs'), type_='foreignkey')
        batch_op.drop_index(batch_op.f('ix_trainings_code_hash'))
        batch_op.drop_column('memory_declared')
        batch_op.drop_column('env')
        batch_op.drop_column('argv')
        batch_op.drop_column('code_hash')
        batch_op.drop_column('kind')
    op.drop_table('code_blobs')
