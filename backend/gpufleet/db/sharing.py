"""Tables for sharing the fleet: groups of users, their quotas and shares, and GPU time per day.

Part of the one data model (:mod:`gpufleet.db.models`, which imports them), kept
in their own module to keep that one readable.
"""

from __future__ import annotations

import uuid
from datetime import date, datetime

from sqlalchemy import BigInteger, CheckConstraint, Date, Float, ForeignKey, Integer, String, UniqueConstraint, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from gpufleet.db.base import Base
from gpufleet.db.types import UTCDateTime, utcnow


class Group(Base):
    """A named set of users, for quotas and usage by group; managed by admins."""

    __tablename__ = "groups"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class GroupMember(Base):
    __tablename__ = "group_members"
    __table_args__ = (UniqueConstraint("group_id", "user_id"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    group_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("groups.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)


class Quota(Base):
    """Limits of one user or one group (exactly one of the two), and a user's fair share."""

    __tablename__ = "quotas"
    __table_args__ = (CheckConstraint("(user_id IS NULL) <> (group_id IS NULL)", name="one_subject"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    user_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), unique=True)
    group_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("groups.id", ondelete="CASCADE"), unique=True)
    max_gpus: Mapped[int | None] = mapped_column(Integer)  # GPUs held at once
    gpu_hours_per_week: Mapped[float | None] = mapped_column(Float)  # held, over a rolling 7 days
    share: Mapped[float] = mapped_column(Float, default=1.0)  # fair-share weight (users)
    # The highest priority its trainings may ask for (None: the default for members), and who set it.
    max_priority: Mapped[int | None] = mapped_column(Integer)
    max_priority_set_by: Mapped[str | None] = mapped_column(String(128))
    # What bookings may hold (gpufleet.bookings.service): for a user, None is the server's default
    # (GPUFLEET_BOOKING_*); for a group, None is no limit, and the limit counts all its members' bookings.
    booking_hours_per_week: Mapped[float | None] = mapped_column(Float)  # GPU-hours booked per week of start
    booking_max_gpus: Mapped[int | None] = mapped_column(Integer)  # GPUs booked at once
    booking_max_hours: Mapped[float | None] = mapped_column(Float)  # the longest one booking
    booking_max_ahead_days: Mapped[float | None] = mapped_column(Float)  # the furthest ahead a booking starts


class UsageDaily(Base):
    """GPU-seconds one training held and used on one UTC day; outlives the allocations and rollups."""

    __tablename__ = "usage_daily"
    __table_args__ = (UniqueConstraint("day", "training_id"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    day: Mapped[date] = mapped_column(Date, index=True)
    training_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    owner: Mapped[str] = mapped_column(String(64))
    gpu_seconds_held: Mapped[float] = mapped_column(Float)
    gpu_seconds_used: Mapped[float] = mapped_column(Float)
