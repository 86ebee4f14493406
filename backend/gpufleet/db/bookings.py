"""Tables of bookings: GPUs held for one owner (or for maintenance) from a start to an end.

``bookings`` is what was asked (owner, kind, the window, where); ``booking_gpus``
holds one row per booked GPU with the window it still holds, so that the
database itself refuses two bookings of one GPU whose windows overlap: on
PostgreSQL an exclusion constraint (btree_gist) over ``gpu_id`` and
``tstzrange(start_at, end_at)``, on SQLite a trigger made by the migration
(``booking_gpus_no_overlap``). A booking cancelled or released gives its GPUs
back by ending their rows' windows at that moment (an empty window overlaps
nothing), so the rows stay as the record of what was held. ``booking_events`` is what its owner is told
of (it starts soon; it was released), read by the webhooks' outbox (gpufleet.notify.outbox).
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    Uuid,
    func,
    literal_column,
    select,
)
from sqlalchemy.dialects.postgresql import ExcludeConstraint
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, Session, mapped_column

from gpufleet.db.base import Base
from gpufleet.db.types import UTCDateTime, utcnow

# The message SQLite's trigger aborts with (and the name of PostgreSQL's constraint): how a conflict is known.
OVERLAP = "booking_gpus_no_overlap"
KINDS = ("booking", "maintenance")
# What a booking's owner is told of: it starts within GPUFLEET_BOOKING_NOTICE_LEAD_S; it was released (by a
# person, or unused).
STARTING, RELEASED = "booking_starting", "booking_released"


class Booking(Base):
    __tablename__ = "bookings"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    owner: Mapped[str] = mapped_column(String(64), index=True)
    kind: Mapped[str] = mapped_column(String(16), default="booking")  # booking | maintenance
    start_at: Mapped[datetime] = mapped_column(UTCDateTime)
    end_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    gpu_count: Mapped[int] = mapped_column(Integer)
    gpu_model: Mapped[str | None] = mapped_column(String(255))  # asked for: any GPU of this model
    host_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    reason: Mapped[str | None] = mapped_column(Text)  # the booker's note (a course's lab, a paper deadline)
    time_zone: Mapped[str] = mapped_column(String(64), default="UTC")  # the zone it was asked in
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Cancelled by a person, or released unused; the GPUs' windows end then.
    released_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    release_reason: Mapped[str | None] = mapped_column(Text)


class BookingGPU(Base):
    """One booked GPU and the window it is still held for."""

    __tablename__ = "booking_gpus"
    __table_args__ = (
        ExcludeConstraint(
            ("gpu_id", "="), (func.tstzrange(literal_column("start_at"), literal_column("end_at")), "&&"),
            using="gist", name=OVERLAP,
        ).ddl_if(dialect="postgresql"),
        CheckConstraint("end_at >= start_at", name="window_forward"),
        Index("ix_booking_gpus_gpu_end", "gpu_id", "end_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    booking_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("bookings.id", ondelete="CASCADE"), index=True)
    gpu_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("gpus.id", ondelete="CASCADE"))
    host_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    gpu_index: Mapped[int] = mapped_column(Integer)
    start_at: Mapped[datetime] = mapped_column(UTCDateTime)
    end_at: Mapped[datetime] = mapped_column(UTCDateTime)


class BookingEvent(Base):
    """One thing a booking's owner is told of, at most once per booking and kind.

    The unique pair is what makes it once: two schedulers that see a booking start soon at the same moment
    both try, and one row is written (:func:`record`). Webhooks are sent from these rows after the fact."""

    __tablename__ = "booking_events"
    __table_args__ = (UniqueConstraint("booking_id", "kind"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    booking_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("bookings.id", ondelete="CASCADE"))
    owner: Mapped[str] = mapped_column(String(64))  # the booking's, whose webhooks hear of it
    kind: Mapped[str] = mapped_column(String(32))  # booking_starting | booking_released
    # When it was written, by the server's own clock (never a pass's injected one): the outbox reads in this order.
    time: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    reason: Mapped[str | None] = mapped_column(Text)
    user: Mapped[str | None] = mapped_column(String(64))  # who did it; None for the server itself


def record(sess: Session, b: Booking, kind: str, reason: str, user: str | None = None) -> bool:
    """Write ``b``'s ``kind`` event unless it is written already; whether this call wrote it."""
    if sess.scalar(select(BookingEvent.id).where(BookingEvent.booking_id == b.id, BookingEvent.kind == kind)):
        return False
    try:
        with sess.begin_nested():  # another server writing the same one now: its row stands, ours goes
            sess.add(BookingEvent(booking_id=b.id, owner=b.owner, kind=kind, time=utcnow(), reason=reason, user=user))
    except IntegrityError:
        return False
    return True


def release_rows(sess: Session, b: Booking, now: datetime, reason: str, user: str | None = None) -> None:
    """End ``b`` now: cancelled (by ``user``), or released unused. Its GPUs' windows end at ``now`` (at their
    start, when it had not begun), so they are free from then and the rows keep what was held; its owner
    is told (a ``booking_released`` event)."""
    if b.released_at is not None:
        return
    b.released_at, b.release_reason = now, reason
    for row in sess.scalars(select(BookingGPU).where(BookingGPU.booking_id == b.id)):
        row.end_at = min(row.end_at, max(row.start_at, now))
    sess.flush()
    record(sess, b, RELEASED, reason, user)


class BookingFeed(Base):
    """A secret feed address of bookings for a calendar app: one's own (``group`` null) or a team's.

    Only the token's SHA-256 is kept; a new token for the same owner and group replaces the old (rotation).
    The token reads that one feed and signs in nowhere: it is not an API token and no auth path looks at it.
    """

    __tablename__ = "booking_feeds"
    __table_args__ = (Index("ix_booking_feeds_owner_group", "owner", "group_name", unique=True),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    owner: Mapped[str] = mapped_column(String(64))
    group_name: Mapped[str] = mapped_column(String(64), default="")  # "" for one's own bookings
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
