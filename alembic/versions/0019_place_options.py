"""place options: a pool's own settings are its kind's (options), and a pool job's state is gpufleet's word

Revision ID: 0019_place_options
Revises: 0018_rungs
Create Date: 2026-12-02
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0019_place_options'
down_revision = '0018_rungs'
branch_labels = None
depends_on = None

JSONDoc = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')

# Slurm's job states as gpufleet's (gpufleet.pools.slurm_place.state_word, as it was when this ran).
_RUNNING = ('RUNNING', 'COMPLETING', 'CONFIGURING', 'STAGE_OUT', 'SIGNALING')
_REQUEUED = ('PREEMPTED', 'REQUEUED', 'REQUEUE_FED', 'REQUEUE_HOLD')
_WORDS = {'PENDING': 'pending', 'COMPLETED': 'completed', 'CANCELLED': 'cancelled', 'TIMEOUT': 'timeout',
          **{s: 'running' for s in _RUNNING}, **{s: 'requeued' for s in _REQUEUED}}
_BACK = {'pending': 'PENDING', 'running': 'RUNNING', 'completed': 'COMPLETED', 'cancelled': 'CANCELLED',
         'timeout': 'TIMEOUT', 'requeued': 'REQUEUED', 'failed': 'FAILED'}


def _drop(table: str, column: str) -> None:
    # SQLite's own DROP COLUMN (3.35+), never a batch copy: copying pools drops the old table, and with
    # foreign keys on that deletes every pool_jobs row (ON DELETE CASCADE).
    if op.get_bind().dialect.name == 'sqlite':
        op.execute(f'ALTER TABLE {table} DROP COLUMN {column}')
    else:
        op.drop_column(table, column)


def upgrade() -> None:
    conn = op.get_bind()
    op.add_column('pools', sa.Column('options', JSONDoc, nullable=False, server_default='{}'))
    pools = sa.table('pools', sa.column('id'), sa.column('partition'), sa.column('account'),
                     sa.column('options', JSONDoc))
    for pid, partition, account in conn.execute(sa.select(pools.c.id, pools.c.partition, pools.c.account)).all():
        conn.execute(pools.update().where(pools.c.id == pid)
                     .values(options={'partition': partition, 'account': account}))
    if conn.dialect.name != 'sqlite':  # (SQLite keeps the default: it alters no column)
        op.alter_column('pools', 'options', existing_type=JSONDoc, server_default=None)
    _drop('pools', 'partition')
    _drop('pools', 'account')
    jobs = sa.table('pool_jobs', sa.column('state', sa.String))
    for state in [s for (s,) in conn.execute(sa.select(jobs.c.state).distinct()).all()]:
        conn.execute(jobs.update().where(jobs.c.state == state).values(state=_WORDS.get(state, 'failed')))


def downgrade() -> None:
    conn = op.get_bind()
    jobs = sa.table('pool_jobs', sa.column('state', sa.String))
    for state in [s for (s,) in conn.execute(sa.select(jobs.c.state).distinct()).all()]:
        conn.execute(jobs.update().where(jobs.c.state == state).values(state=_BACK.get(state, 'FAILED')))
    op.add_column('pools', sa.Column('partition', sa.String(length=255), nullable=True))
    op.add_column('pools', sa.Column('account', sa.String(length=255), nullable=True))
    pools = sa.table('pools', sa.column('id'), sa.column('partition'), sa.column('account'),
                     sa.column('options', JSONDoc))
    for pid, options in conn.execute(sa.select(pools.c.id, pools.c.options)).all():
        options = json.loads(options) if isinstance(options, str) else (options or {})
        conn.execute(pools.update().where(pools.c.id == pid)
                     .values(partition=options.get('partition') or '', account=options.get('account')))
    if conn.dialect.name != 'sqlite':  # (on SQLite the column stays nullable: a batch copy would cascade)
        op.alter_column('pools', 'partition', existing_type=sa.String(length=255), nullable=False)
    _drop('pools', 'options')
