"""Tables for interactive sessions: what a session has beside its ``trainings`` row, and admins' limits.

A session is a row of ``trainings`` with ``kind = 'session'`` (so the queue,
quotas, fair share, allocations and usage treat it as any other work); what
only a session has lives here. Part of the one data model
(:mod:`gpufleet.db.models`, which imports them).
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Boolean, CheckConstraint, Float, ForeignKey, Integer, String, UniqueConstraint, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from gpufleet.db.base import Base
from gpufleet.db.types import UTCDateTime, utcnow


class TrainingSession(Base):
    """The session side of a ``trainings`` row of kind ``session``."""

    __tablename__ = "training_sessions"

    training_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("trainings.id", ondelete="CASCADE"), primary_key=True)
    jupyter: Mapped[bool] = mapped_column(Boolean, default=False)
    hours: Mapped[float] = mapped_column(Float)  # the time limit asked for, plus every extension
    # The Jupyter server, once the worker started it: loopback port and the token only gpufleet knows.
    port: Mapped[int | None] = mapped_column(Integer)
    token: Mapped[str | None] = mapped_column(String(128))
    ready_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Newest sign of use the notebook server reported (a busy kernel, a connection, a request).
    active_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    idle_warned_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Why a stop was asked: user | idle | time_limit; who asked (user stops).
    stop_reason: Mapped[str | None] = mapped_column(String(16))
    stopped_by: Mapped[str | None] = mapped_column(String(64))
    ended_recorded: Mapped[bool] = mapped_column(Boolean, default=False)  # its session_stopped event is written
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class SessionLimit(Base):
    """An admin's maximum session length (hours, extensions included) for one user or one group."""

    __tablename__ = "session_limits"
    __table_args__ = (
        UniqueConstraint("subject_kind", "subject"),
        CheckConstraint("subject_kind in ('user', 'group')", name="ck_session_limits_kind"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    subject_kind: Mapped[str] = mapped_column(String(8))
    subject: Mapped[str] = mapped_column(String(64))
    max_hours: Mapped[float] = mapped_column(Float)
    set_by: Mapped[str | None] = mapped_column(String(64))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
