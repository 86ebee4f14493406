"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import gpufleet.db.types

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('gpu_metrics_history',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('timestamp', gpufleet.db.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('host_id', sa.Uuid(), nullable=False),
    sa.Column('gpu_index', sa.Integer(), nullable=False),
    sa.Column('utilization', sa.Float(), nullable=False),
    sa.Column('memory_used', sa.BigInteger(), nullable=False),
    sa.Column('memory_total', sa.BigInteger(), nullable=False),
    sa.Column('temperature', sa.Float(), nullable=True),
    sa.Column('power_draw', sa.Float(), nullable=True),
    sa.Column('job_id', sa.Uuid(), nullable=True),
    sa.Column('job_type', sa.String(length=50), nullable=True),
    sa.PrimaryKeyConstraint('id', 'timestamp', name=op.f('pk_gpu_metrics_history')),
    sa.UniqueConstraint('host_id', 'gpu_index', 'timestamp', name=op.f('uq_gpu_metrics_history_host_id_gpu_index_timestamp')),
    postgresql_partition_by='RANGE (timestamp)'
    )
    if op.get_bind().dialect.name == "postgresql":
        # Samples land in daily partitions that the telemetry storage creates
        # ahead of time; the default partition catches anything outside them.
        op.execute("CREATE TABLE gpu_metrics_history_default PARTITION OF gpu_metrics_history DEFAULT")
    op.create_index('idx_gpu_metrics_gpu', 'gpu_metrics_history', ['gpu_index'], unique=False)
    op.create_index('idx_gpu_metrics_time', 'gpu_metrics_history', [sa.literal_column('timestamp DESC')], unique=False)
    op.create_table('gpu_metrics_rollup',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('host_id', sa.Uuid(), nullable=False),
    sa.Column('gpu_index', sa.Integer(), nullable=False),
    sa.Column('bucket', gpufleet.db.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('samples', sa.Integer(), nullable=False),
    sa.Column('utilization_min', sa.Float(), nullable=False),
    sa.Column('utilization_avg', sa.Float(), nullable=False),
    sa.Column('utilization_max', sa.Float(), nullable=False),
    sa.Column('memory_used_min', sa.BigInteger(), nullable=False),
    sa.Column('memory_used_avg', sa.Float(), nullable=False),
    sa.Column('memory_used_max', sa.BigInteger(), nullable=False),
    sa.Column('memory_total', sa.BigInteger(), nullable=False),
    sa.Column('temperature_max', sa.Float(), nullable=True),
    sa.Column('temperature_avg', sa.Float(), nullable=True),
    sa.Column('power_draw_avg', sa.Float(), nullable=True),
    sa.Column('power_draw_max', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_gpu_metrics_rollup')),
    sa.UniqueConstraint('host_id', 'gpu_index', 'bucket', name=op.f('uq_gpu_metrics_rollup_host_id_gpu_index_bucket'))
    )
    op.create_index(op.f('ix_gpu_metrics_rollup_bucket'), 'gpu_metrics_rollup', ['bucket'], unique=False)
    op.create_table('hosts',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('address', sa.String(length=255), nullable=True),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('agent_version', sa.String(length=64), nullable=True),
    sa.Column('simulated', sa.Boolean(), nullable=False),
    sa.Column('last_heartbeat', gpufleet.db.types.UTCDateTime(timezone=True), nullable=True),
    sa.Column('created_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_hosts')),
    sa.UniqueConstraint('name', name=op.f('uq_hosts_name'))
    )
    op.create_table('users',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('role', sa.String(length=16), nullable=False),
    sa.Column('disabled', sa.Boolean(), nullable=False),
    sa.Column('created_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_users')),
    sa.UniqueConstraint('name', name=op.f('uq_users_name'))
    )
    op.create_table('api_tokens',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('user_id', sa.Uuid(), nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('token_hash', sa.String(length=128), nullable=False),
    sa.Column('prefix', sa.String(length=16), nullable=False),
    sa.Column('created_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('expires_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=True),
    sa.Column('revoked_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=True),
    sa.Column('last_used_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_api_tokens_user_id_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_tokens')),
    sa.UniqueConstraint('token_hash', name=op.f('uq_api_tokens_token_hash'))
    )
    op.create_index(op.f('ix_api_tokens_user_id'), 'api_tokens', ['user_id'], unique=False)
    op.create_table('gpu_links',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('host_id', sa.Uuid(), nullable=False),
    sa.Column('gpu_a', sa.Integer(), nullable=False),
    sa.Column('gpu_b', sa.Integer(), nullable=False),
    sa.Column('nvlink_count', sa.Integer(), nullable=False),
    sa.Column('pcie_level', sa.String(length=16), nullable=True),
    sa.Column('peer_access', sa.Boolean(), nullable=False),
    sa.ForeignKeyConstraint(['host_id'], ['hosts.id'], name=op.f('fk_gpu_links_host_id_hosts'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_gpu_links')),
    sa.UniqueConstraint('host_id', 'gpu_a', 'gpu_b', name=op.f('uq_gpu_links_host_id_gpu_a_gpu_b'))
    )
    op.create_index(op.f('ix_gpu_links_host_id'), 'gpu_links', ['host_id'], unique=False)
    op.create_table('gpus',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('host_id', sa.Uuid(), nullable=False),
    sa.Column('index', sa.Integer(), nullable=False),
    sa.Column('uuid', sa.String(length=128), nullable=True),
    sa.Column('vendor', sa.String(length=32), nullable=False),
    sa.Column('backend', sa.String(length=16), nullable=False),
    sa.Column('backend_device_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('pci_bus_id', sa.String(length=64), nullable=True),
    sa.Column('memory_total', sa.BigInteger(), nullable=True),
    sa.Column('compute_capability', sa.String(length=16), nullable=True),
    sa.Column('simulated', sa.Boolean(), nullable=False),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('status_reason', sa.Text(), nullable=True),
    sa.Column('enabled', sa.Boolean(), nullable=False),
    sa.Column('drained', sa.Boolean(), nullable=False),
    sa.Column('drain_reason', sa.Text(), nullable=True),
    sa.Column('last_seen', gpufleet.db.types.UTCDateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['host_id'], ['hosts.id'], name=op.f('fk_gpus_host_id_hosts'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_gpus')),
    sa.UniqueConstraint('host_id', 'index', name=op.f('uq_gpus_host_id_index'))
    )
    op.create_index(op.f('ix_gpus_host_id'), 'gpus', ['host_id'], unique=False)
    op.create_table('trainings',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('owner', sa.String(length=64), nullable=False),
    sa.Column('recipe', sa.String(length=128), nullable=False),
    sa.Column('config', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('status_reason', sa.Text(), nullable=True),
    sa.Column('priority', sa.Integer(), nullable=False),
    sa.Column('gpu_ids', sa.JSON().with_variant(postgresql.ARRAY(sa.Integer()), 'postgresql'), nullable=True),
    sa.Column('distributed', sa.Boolean(), server_default=sa.text('false'), nullable=False),
    sa.Column('world_size', sa.Integer(), server_default=sa.text('1'), nullable=False),
    sa.Column('requested_host', sa.String(length=255), nullable=True),
    sa.Column('host_id', sa.Uuid(), nullable=True),
    sa.Column('auto_select', sa.Boolean(), nullable=False),
    sa.Column('requested_count', sa.Integer(), nullable=True),
    sa.Column('exclusive', sa.Boolean(), nullable=False),
    sa.Column('memory_estimate', sa.BigInteger(), nullable=True),
    sa.Column('estimate', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('estimate_key', sa.String(length=255), nullable=True),
    sa.Column('selection', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('wait_reason', sa.Text(), nullable=True),
    sa.Column('measured_peak_memory', sa.BigInteger(), nullable=True),
    sa.Column('peak_memory_per_rank', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('restarts', sa.Integer(), nullable=False),
    sa.Column('max_restarts', sa.Integer(), nullable=False),
    sa.Column('allow_rebalance', sa.Boolean(), nullable=False),
    sa.Column('checkpoint_every', sa.Integer(), nullable=True),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('lease_owner', sa.String(length=255), nullable=True),
    sa.Column('lease_expires_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=True),
    sa.Column('launcher_pid', sa.Integer(), nullable=True),
    sa.Column('exit_code', sa.Integer(), nullable=True),
    sa.Column('cancel_requested', sa.Boolean(), nullable=False),
    sa.Column('not_before', gpufleet.db.types.UTCDateTime(timezone=True), nullable=True),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('max_steps', sa.Integer(), nullable=True),
    sa.Column('last_loss', sa.Float(), nullable=True),
    sa.Column('last_checkpoint', sa.Text(), nullable=True),
    sa.Column('event_seq', sa.Integer(), nullable=False),
    sa.Column('created_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('updated_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('scheduled_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=True),
    sa.Column('started_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=True),
    sa.Column('finished_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['host_id'], ['hosts.id'], name=op.f('fk_trainings_host_id_hosts')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_trainings'))
    )
    op.create_index(op.f('ix_trainings_estimate_key'), 'trainings', ['estimate_key'], unique=False)
    op.create_index(op.f('ix_trainings_host_id'), 'trainings', ['host_id'], unique=False)
    op.create_index(op.f('ix_trainings_lease_expires_at'), 'trainings', ['lease_expires_at'], unique=False)
    op.create_index(op.f('ix_trainings_owner'), 'trainings', ['owner'], unique=False)
    op.create_index('ix_trainings_status_priority_created', 'trainings', ['status', 'priority', 'created_at'], unique=False)
    op.create_table('gpu_allocations',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('training_id', sa.Uuid(), nullable=False),
    sa.Column('gpu_id', sa.Uuid(), nullable=False),
    sa.Column('host_id', sa.Uuid(), nullable=False),
    sa.Column('gpu_index', sa.Integer(), nullable=False),
    sa.Column('exclusive', sa.Boolean(), nullable=False),
    sa.Column('reserved_memory', sa.BigInteger(), nullable=True),
    sa.Column('allocated_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('released_at', gpufleet.db.types.UTCDateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['gpu_id'], ['gpus.id'], name=op.f('fk_gpu_allocations_gpu_id_gpus'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['host_id'], ['hosts.id'], name=op.f('fk_gpu_allocations_host_id_hosts'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['training_id'], ['trainings.id'], name=op.f('fk_gpu_allocations_training_id_trainings'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_gpu_allocations'))
    )
    op.create_index('ix_gpu_allocations_active', 'gpu_allocations', ['gpu_id', 'released_at'], unique=False)
    op.create_index(op.f('ix_gpu_allocations_training_id'), 'gpu_allocations', ['training_id'], unique=False)
    op.create_index('uq_gpu_allocations_exclusive_active', 'gpu_allocations', ['gpu_id'], unique=True, postgresql_where=sa.text('exclusive AND released_at IS NULL'), sqlite_where=sa.text('exclusive AND released_at IS NULL'))
    op.create_table('training_events',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('training_id', sa.Uuid(), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('time', gpufleet.db.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('status', sa.String(length=32), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('user', sa.String(length=64), nullable=True),
    sa.Column('data', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.ForeignKeyConstraint(['training_id'], ['trainings.id'], name=op.f('fk_training_events_training_id_trainings'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_training_events')),
    sa.UniqueConstraint('training_id', 'seq', name=op.f('uq_training_events_training_id_seq'))
    )
    op.create_table('training_metrics',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('training_id', sa.Uuid(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('time', gpufleet.db.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('loss', sa.Float(), nullable=True),
    sa.Column('metrics', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('rank_step_times', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.ForeignKeyConstraint(['training_id'], ['trainings.id'], name=op.f('fk_training_metrics_training_id_trainings'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_training_metrics')),
    sa.UniqueConstraint('training_id', 'step', name=op.f('uq_training_metrics_training_id_step'))
    )


def downgrade() -> None:
    op.drop_table('training_metrics')
    op.drop_table('training_events')
    op.drop_index('uq_gpu_allocations_exclusive_active', table_name='gpu_allocations', postgresql_where=sa.text('exclusive AND released_at IS NULL'), sqlite_where=sa.text('exclusive AND released_at IS NULL'))
    op.drop_index(op.f('ix_gpu_allocations_training_id'), table_name='gpu_allocations')
    op.drop_index('ix_gpu_allocations_active', table_name='gpu_allocations')
    op.drop_table('gpu_allocations')
    op.drop_index('ix_trainings_status_priority_created', table_name='trainings')
    op.drop_index(op.f('ix_trainings_owner'), table_name='trainings')
    op.drop_index(op.f('ix_trainings_lease_expires_at'), table_name='trainings')
    op.drop_index(op.f('ix_trainings_host_id'), table_name='trainings')
    op.drop_index(op.f('ix_trainings_estimate_key'), table_name='trainings')
    op.drop_table('trainings')
    op.drop_index(op.f('ix_gpus_host_id'), table_name='gpus')
    op.drop_table('gpus')
    op.drop_index(op.f('ix_gpu_links_host_id'), table_name='gpu_links')
    op.drop_table('gpu_links')
    op.drop_index(op.f('ix_api_tokens_user_id'), table_name='api_tokens')
    op.drop_table('api_tokens')
    op.drop_table('users')
    op.drop_table('hosts')
    op.drop_index(op.f('ix_gpu_metrics_rollup_bucket'), table_name='gpu_metrics_rollup')
    op.drop_table('gpu_metrics_rollup')
    op.drop_index('idx_gpu_metrics_time', table_name='gpu_metrics_history')
    op.drop_index('idx_gpu_metrics_gpu', table_name='gpu_metrics_history')
    op.drop_table('gpu_metrics_history')
