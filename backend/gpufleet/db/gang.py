"""The tables of a training across hosts: each host's part, and where the ranks meet.

Part of the one data model (:mod:`gpufleet.db.models`, which imports them).
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import ForeignKey, Integer, String, Text, UniqueConstraint, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from gpufleet.db.base import Base
from gpufleet.db.types import IntList, UTCDateTime, utcnow


class GangMember(Base):
    """One host of a training across hosts: its GPUs, its ranks, its worker's heartbeat.

    Written with the reservation (status ``reserved``); the host's worker
    marks it ``running`` for an attempt and beats ``heartbeat_at`` while its
    ranks run (gpufleet.jobs.rendezvous, gpufleet.jobs.gang_member).
    """

    __tablename__ = "gang_members"
    __table_args__ = (UniqueConstraint("training_id", "host_id"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    training_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("trainings.id", ondelete="CASCADE"), index=True)
    host_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    host_name: Mapped[str] = mapped_column(String(255))
    node_rank: Mapped[int] = mapped_column(Integer)
    first_rank: Mapped[int] = mapped_column(Integer)
    gpu_ids: Mapped[list[int]] = mapped_column(IntList)
    # reserved | running | succeeded | failed | stopped
    status: Mapped[str] = mapped_column(String(32), default="reserved")
    attempt: Mapped[int | None] = mapped_column(Integer)
    worker_id: Mapped[str | None] = mapped_column(String(255))
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    launcher_pid: Mapped[int | None] = mapped_column(Integer)
    message: Mapped[str | None] = mapped_column(Text)


class GangRendezvous(Base):
    """Where the ranks of a training across hosts meet, for one attempt: the
    TCPStore the rank-0 host opens, and the token of its checkpoint-root marker."""

    __tablename__ = "gang_rendezvous"

    training_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("trainings.id", ondelete="CASCADE"), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer)
    address: Mapped[str] = mapped_column(String(255))
    port: Mapped[int] = mapped_column(Integer)
    marker: Mapped[str] = mapped_column(String(64))
    published_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
