"""SQLAlchemy 2 typed models: the whole data model.

The database is the truth for hosts, GPUs, trainings and reservations; Celery
only delivers work. Keys are UUIDs, times are timezone-aware.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from gpufleet.db.base import NAMING, Base  # noqa: F401 - every model's base, and its naming
from gpufleet.db.types import IntList, JSONDoc, UTCDateTime, utcnow
# A training's statuses (the row is the truth), defined once; named here too for the tables' users.
from gpufleet.db.statuses import ACTIVE_STATUSES, FINAL_STATUSES, TRAINING_STATUSES, TrainingStatus  # noqa: F401



class Host(Base):
    __tablename__ = "hosts"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    address: Mapped[str | None] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(32), default="online")
    agent_version: Mapped[str | None] = mapped_column(String(64))
    simulated: Mapped[bool] = mapped_column(Boolean, default=False)
    last_heartbeat: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # The worker's own beat (the agent's heartbeat above may outlive it), and when and why its
    # worker was found lost: no work is placed here until that worker beats again (jobs/recovery.py).
    worker_seen_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    worker_lost_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    worker_lost_reason: Mapped[str | None] = mapped_column(String(500))

    gpus: Mapped[list["GPU"]] = relationship(back_populates="host", order_by="GPU.index")


class GPU(Base):
    __tablename__ = "gpus"
    __table_args__ = (UniqueConstraint("host_id", "index"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    host_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    uuid: Mapped[str | None] = mapped_column(String(128))
    vendor: Mapped[str] = mapped_column(String(32))
    backend: Mapped[str] = mapped_column(String(16))  # cuda | hip | xpu
    backend_device_id: Mapped[int] = mapped_column(Integer, default=0)
    name: Mapped[str] = mapped_column(String(255))
    pci_bus_id: Mapped[str | None] = mapped_column(String(64))
    memory_total: Mapped[int | None] = mapped_column(BigInteger)
    compute_capability: Mapped[str | None] = mapped_column(String(16))
    simulated: Mapped[bool] = mapped_column(Boolean, default=False)
    # ok | missing | unhealthy
    status: Mapped[str] = mapped_column(String(32), default="ok")
    status_reason: Mapped[str | None] = mapped_column(Text)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    drained: Mapped[bool] = mapped_column(Boolean, default=False)
    drain_reason: Mapped[str | None] = mapped_column(Text)
    last_seen: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The CUDA context a process holds on this GPU, measured by the host's agent (devices/context_probe.py).
    context_bytes: Mapped[int | None] = mapped_column(BigInteger)

    host: Mapped[Host] = relationship(back_populates="gpus")


class GPULink(Base):
    __tablename__ = "gpu_links"
    __table_args__ = (UniqueConstraint("host_id", "gpu_a", "gpu_b"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    host_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"), index=True)
    gpu_a: Mapped[int] = mapped_column(Integer)
    gpu_b: Mapped[int] = mapped_column(Integer)
    nvlink_count: Mapped[int] = mapped_column(Integer, default=0)
    # nvidia-smi topo levels: SAME, PIX, PXB, PHB, NODE, SYS
    pcie_level: Mapped[str | None] = mapped_column(String(16))
    peer_access: Mapped[bool] = mapped_column(Boolean, default=False)


class User(Base):
    __tablename__ = "users"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(String(16), default="member")  # admin | member | viewer
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # May submit its own code (script trainings); admins always may.
    run_code: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    # May ask for trainings no higher-priority one can preempt; admins always may.
    non_preemptible: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    # The Unix account this user's trainings run as (gpufleet.users.runas); None: the rule's fallbacks.
    unix_account: Mapped[str | None] = mapped_column(String(32))


class APIToken(Base):
    __tablename__ = "api_tokens"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(128))
    # Only a hash is stored; the prefix lets a person recognise a token.
    token_hash: Mapped[str] = mapped_column(String(128), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Training(Base):
    __tablename__ = "trainings"
    __table_args__ = (
        Index("ix_trainings_status_priority_created", "status", "priority", "created_at"),
        # The scheduler's queue order, queued rows only (migration 0015_queue_index).
        Index("ix_trainings_queue", text("priority DESC"), "created_at", "id",
              postgresql_where=text("status = 'queued'"), sqlite_where=text("status = 'queued'")),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(255))
    owner: Mapped[str] = mapped_column(String(64), index=True)
    recipe: Mapped[str] = mapped_column(String(128))
    # recipe | script (a user's own code: code_hash + argv, see gpufleet.trainings)
    kind: Mapped[str] = mapped_column(String(16), default="recipe", server_default=text("'recipe'"))
    code_hash: Mapped[str | None] = mapped_column(ForeignKey("code_blobs.hash"), index=True)
    argv: Mapped[list[str] | None] = mapped_column(JSONDoc)
    env: Mapped[dict[str, str] | None] = mapped_column(JSONDoc)
    # Per-GPU memory the submitter declared (bytes), as opposed to an estimate.
    memory_declared: Mapped[int | None] = mapped_column(BigInteger)
    # The resolved config, as validated by the recipe's dataclass.
    config: Mapped[dict[str, Any]] = mapped_column(JSONDoc)
    status: Mapped[TrainingStatus] = mapped_column(String(32), default="queued")
    status_reason: Mapped[str | None] = mapped_column(Text)
    priority: Mapped[int] = mapped_column(Integer, default=0)

    # The seed's columns: gpu_ids = [0, 1], distributed = true, world_size = 2.
    gpu_ids: Mapped[list[int] | None] = mapped_column(IntList)
    distributed: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    world_size: Mapped[int] = mapped_column(Integer, default=1, server_default=text("1"))

    requested_host: Mapped[str | None] = mapped_column(String(255))
    host_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("hosts.id"), index=True)
    auto_select: Mapped[bool] = mapped_column(Boolean, default=False)
    requested_count: Mapped[int | None] = mapped_column(Integer)
    exclusive: Mapped[bool] = mapped_column(Boolean, default=True)

    # GPU selection: estimate, choice and reasons, shown by the API.
    memory_estimate: Mapped[int | None] = mapped_column(BigInteger)
    estimate: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    estimate_key: Mapped[str | None] = mapped_column(String(255), index=True)
    selection: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    wait_reason: Mapped[str | None] = mapped_column(Text)
    measured_peak_memory: Mapped[int | None] = mapped_column(BigInteger)
    peak_memory_per_rank: Mapped[list[int] | None] = mapped_column(JSONDoc)

    # Supervision.
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    max_restarts: Mapped[int] = mapped_column(Integer, default=2)
    allow_rebalance: Mapped[bool] = mapped_column(Boolean, default=False)
    checkpoint_every: Mapped[int | None] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, index=True)
    launcher_pid: Mapped[int | None] = mapped_column(Integer)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    not_before: Mapped[datetime | None] = mapped_column(UTCDateTime)

    # Sharing the fleet (gpufleet.scheduling.preemption, .backfill, .idle).
    preemptible: Mapped[bool] = mapped_column(Boolean, default=True, server_default=text("true"))
    # Running: the training whose arrival asks this one to checkpoint and stop.
    # Preempted: the training its GPUs are kept for.
    preempted_by: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    max_runtime_s: Mapped[int | None] = mapped_column(Integer)
    idle_since: Mapped[datetime | None] = mapped_column(UTCDateTime)
    idle_warned_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Set by the idle watch under the ``stop`` policy; the supervisor checkpoints and stops it.
    reclaim_requested: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))

    # Progress.
    step: Mapped[int] = mapped_column(Integer, default=0)
    max_steps: Mapped[int | None] = mapped_column(Integer)
    last_loss: Mapped[float | None] = mapped_column(Float)
    last_checkpoint: Mapped[str | None] = mapped_column(Text)
    event_seq: Mapped[int] = mapped_column(Integer, default=0)

    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    scheduled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # A training across hosts (gpufleet.scheduling.gang): what was asked, e.g.
    # {"hosts": 2, "gpus_per_host": 4, "host_names": null, "spread": "auto"}; null for one host.
    gang: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    resumed_from: Mapped[uuid.UUID | None] = mapped_column(Uuid)  # --from: its first attempt copies that checkpoint
    sweep_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("sweeps.id", ondelete="SET NULL"), index=True)
    pool: Mapped[str | None] = mapped_column(String(64), index=True)  # runs in this pool (db/pools.py), not on hosts
    # A sweep's trial (gpufleet.sweeps.driver): the rung steps its ranks wait at for the sweep's go-ahead, the
    # newest of them it was let past, and how a cancel ends it ("pruned": the sweep stopped it at a rung).
    rung_steps: Mapped[list[int] | None] = mapped_column(JSONDoc)
    passed_rung_step: Mapped[int | None] = mapped_column(Integer)
    cancel_as: Mapped[str | None] = mapped_column(String(32))

    host: Mapped[Host | None] = relationship()


class CodeBlob(Base):
    """A user's code archive, stored once per content hash (sha256 of the archive bytes).

    Kept in the database so that every worker of a fleet can fetch it; a blob
    that a training refers to is never removed.
    """

    __tablename__ = "code_blobs"

    hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    unpacked_size: Mapped[int] = mapped_column(BigInteger)
    files: Mapped[int] = mapped_column(Integer)
    content: Mapped[bytes] = mapped_column(LargeBinary)
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class GPUAllocation(Base):
    """Which training holds which GPU.

    An active allocation has ``released_at`` NULL. The partial unique index
    ``uq_gpu_allocations_exclusive_active`` makes it impossible for two
    exclusive allocations of one GPU to be active at once; the scheduler also
    locks the GPU rows so that shared and exclusive holders never overlap.
    """

    __tablename__ = "gpu_allocations"
    __table_args__ = (
        Index(
            "uq_gpu_allocations_exclusive_active",
            "gpu_id",
            unique=True,
            postgresql_where=text("exclusive AND released_at IS NULL"),
            sqlite_where=text("exclusive AND released_at IS NULL"),
        ),
        Index("ix_gpu_allocations_active", "gpu_id", "released_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    training_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("trainings.id", ondelete="CASCADE"), index=True
    )
    gpu_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("gpus.id", ondelete="CASCADE"))
    host_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    gpu_index: Mapped[int] = mapped_column(Integer)
    exclusive: Mapped[bool] = mapped_column(Boolean, default=True)
    reserved_memory: Mapped[int | None] = mapped_column(BigInteger)
    allocated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    released_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class GPUMetricsHistory(Base):
    """One sample of one GPU: exactly the seed's columns plus the host reference.

    On PostgreSQL the table is partitioned by day on ``timestamp`` so that
    retention drops whole partitions (see gpufleet.telemetry.storage); the
    primary key therefore includes ``timestamp``.
    """

    __tablename__ = "gpu_metrics_history"
    __table_args__ = (
        UniqueConstraint("host_id", "gpu_index", "timestamp"),
        Index("idx_gpu_metrics_time", text("timestamp DESC")),
        Index("idx_gpu_metrics_gpu", "gpu_index"),
        {"postgresql_partition_by": "RANGE (timestamp)"},
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    timestamp: Mapped[datetime] = mapped_column(UTCDateTime, primary_key=True)
    host_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    gpu_index: Mapped[int] = mapped_column(Integer)
    utilization: Mapped[float] = mapped_column(Float)
    memory_used: Mapped[int] = mapped_column(BigInteger)
    memory_total: Mapped[int] = mapped_column(BigInteger)
    temperature: Mapped[float | None] = mapped_column(Float)
    power_draw: Mapped[float | None] = mapped_column(Float)
    job_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    job_type: Mapped[str | None] = mapped_column(String(50))


class GPUMetricsRollup(Base):
    """One-minute rollups of gpu_metrics_history, kept longer than raw samples."""

    __tablename__ = "gpu_metrics_rollup"
    __table_args__ = (UniqueConstraint("host_id", "gpu_index", "bucket"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    host_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    gpu_index: Mapped[int] = mapped_column(Integer)
    bucket: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    samples: Mapped[int] = mapped_column(Integer)
    utilization_min: Mapped[float] = mapped_column(Float)
    utilization_avg: Mapped[float] = mapped_column(Float)
    utilization_max: Mapped[float] = mapped_column(Float)
    memory_used_min: Mapped[int] = mapped_column(BigInteger)
    memory_used_avg: Mapped[float] = mapped_column(Float)
    memory_used_max: Mapped[int] = mapped_column(BigInteger)
    memory_total: Mapped[int] = mapped_column(BigInteger)
    temperature_max: Mapped[float | None] = mapped_column(Float)
    temperature_avg: Mapped[float | None] = mapped_column(Float)
    power_draw_avg: Mapped[float | None] = mapped_column(Float)
    power_draw_max: Mapped[float | None] = mapped_column(Float)


class TrainingMetric(Base):
    __tablename__ = "training_metrics"
    __table_args__ = (UniqueConstraint("training_id", "step"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    training_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("trainings.id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(Integer)
    time: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    loss: Mapped[float | None] = mapped_column(Float)
    # Loss parts and recipe metrics (reconstruction, sparsity, samples_per_s, lr, ...).
    metrics: Mapped[dict[str, Any]] = mapped_column(JSONDoc, default=dict)
    rank_step_times: Mapped[list[float] | None] = mapped_column(JSONDoc)


class TrainingEvent(Base):
    __tablename__ = "training_events"
    __table_args__ = (UniqueConstraint("training_id", "seq"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    training_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("trainings.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    time: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # status | retry | warning | error | checkpoint | cancel | info
    kind: Mapped[str] = mapped_column(String(32))
    status: Mapped[str | None] = mapped_column(String(32))
    reason: Mapped[str | None] = mapped_column(Text)
    user: Mapped[str | None] = mapped_column(String(64))
    data: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)


from gpufleet.db.sharing import Group, GroupMember, Quota, UsageDaily  # noqa: E402,F401 - every table, one import away
from gpufleet.db.signin import BrowserSession  # noqa: E402,F401
from gpufleet.db.logchunks import TrainingLogChunk  # noqa: E402,F401
from gpufleet.db.notify import NotifyCursor, Webhook, WebhookDelivery  # noqa: E402,F401
from gpufleet.db.interactive import SessionLimit, TrainingSession  # noqa: E402,F401
from gpufleet.db.sweeps import Sweep, SweepTrial  # noqa: E402,F401
from gpufleet.db.idempotency import IdempotencyKey  # noqa: E402,F401
from gpufleet.db.gang import GangMember, GangRendezvous  # noqa: E402,F401
from gpufleet.db.pools import Pool, PoolJob  # noqa: E402,F401
from gpufleet.db.bookings import Booking, BookingFeed, BookingGPU  # noqa: E402,F401
