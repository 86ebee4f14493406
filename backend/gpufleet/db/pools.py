"""Tables of pools: places an existing scheduler owns (a Slurm partition), and the jobs sent there.

A training sent to a pool is an ordinary row of ``trainings`` (``trainings.pool``
names the pool); ``pool_jobs`` keeps one row per attempt: the job the pool's
scheduler knows it by, and the state (in gpufleet's words) and reason it last
reported. A pool's own settings are its kind's (``options``, checked by the
kind: gpufleet.pools.place).
"""

from __future__ import annotations

import uuid
from datetime import datetime

from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Integer, String, Text, UniqueConstraint, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from gpufleet.db.base import Base
from gpufleet.db.types import JSONDoc, UTCDateTime, utcnow


class Pool(Base):
    __tablename__ = "pools"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    kind: Mapped[str] = mapped_column(String(16), default="slurm")
    # The kind's own settings, as its ``options`` checked them (Slurm: partition, account).
    options: Mapped[dict[str, Any]] = mapped_column(JSONDoc, default=dict)
    gpus_per_node: Mapped[int | None] = mapped_column(Integer)
    gpu_model: Mapped[str | None] = mapped_column(String(255))
    gpu_memory: Mapped[int | None] = mapped_column(BigInteger)  # bytes per GPU
    # A folder both this host and the cluster's nodes see: each training's checkpoints, progress and output.
    checkpoint_root: Mapped[str] = mapped_column(Text)
    # The Python with gpufleet installed, at the same path on the nodes.
    python: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class PoolJob(Base):
    __tablename__ = "pool_jobs"
    __table_args__ = (UniqueConstraint("training_id", "attempt"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    training_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("trainings.id", ondelete="CASCADE"), index=True)
    pool_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    job_id: Mapped[str] = mapped_column(String(64))
    account: Mapped[str] = mapped_column(String(64))  # the Unix account it was submitted as
    # The job's state in gpufleet's words (gpufleet.pools.place.JOB_STATES: pending, running, completed ...),
    # and the pool's own code for why it waits (Slurm's "Resources").
    state: Mapped[str] = mapped_column(String(32), default="pending", index=True)
    reason: Mapped[str | None] = mapped_column(Text)
    nodes: Mapped[str | None] = mapped_column(Text)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    # Where the job's output goes, and how far it has been shipped into the training's log.
    output: Mapped[str] = mapped_column(Text)
    output_offset: Mapped[int] = mapped_column(BigInteger, default=0)
    submitted_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # What the usage report counts: when Slurm started and ended the job and the GPUs it held. Set from
    # squeue while it runs; from Slurm's accounting (sacct, or its job-completion log) once it ended,
    # which ``accounted_by`` names (None: Slurm kept no record, and squeue's figures stand).
    run_start: Mapped[datetime | None] = mapped_column(UTCDateTime, index=True)
    run_end: Mapped[datetime | None] = mapped_column(UTCDateTime)
    gpus: Mapped[int | None] = mapped_column(Integer)
    accounted_by: Mapped[str | None] = mapped_column(String(16))
