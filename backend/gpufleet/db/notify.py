"""Tables for notifications: users' webhooks, and the deliveries owed to them.

Part of the one data model (:mod:`gpufleet.db.models`, which imports them).
Deliveries are made from ``training_events`` (an outbox read by
``gpufleet.notify.outbox``): nothing on a training's own write path knows
of webhooks. ``notify_cursor`` remembers how far that reading got, so a
restart goes on where it stopped.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, Boolean, CheckConstraint, ForeignKey, Integer, String, Text, UniqueConstraint, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from gpufleet.db.base import Base
from gpufleet.db.types import JSONDoc, UTCDateTime, utcnow


class Webhook(Base):
    __tablename__ = "webhooks"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    # The user it belongs to, by name (as ``trainings.owner``, whose events it is sent).
    owner: Mapped[str] = mapped_column(String(64), index=True)
    url: Mapped[str] = mapped_column(Text)
    format: Mapped[str] = mapped_column(String(16))  # json | slack
    events: Mapped[list[str]] = mapped_column(JSONDoc)
    # The HMAC key of the json format's signature; shown to its owner once, when made.
    secret: Mapped[str] = mapped_column(String(128))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class WebhookDelivery(Base):
    """One event owed to one webhook: tried until delivered or out of attempts.

    The event is a training's (``event_id``) or a booking's (``booking_event_id``), exactly one of them."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("webhook_id", "event_id"),
        UniqueConstraint("webhook_id", "booking_event_id"),
        CheckConstraint("(event_id IS NULL) <> (booking_event_id IS NULL)", name="one_event"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    webhook_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"))
    event_id: Mapped[int | None] = mapped_column(ForeignKey("training_events.id", ondelete="CASCADE"), index=True)
    booking_event_id: Mapped[int | None] = mapped_column(ForeignKey("booking_events.id", ondelete="CASCADE"),
                                                         index=True)
    # The notification's name: training_succeeded, session_ready, booking_starting ...
    event: Mapped[str] = mapped_column(String(32))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # When it may be tried next; a sender claims it by moving this past its own try.
    next_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    gave_up_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class NotifyCursor(Base):
    """How far an outbox has been read: ``webhooks`` (``training_events``), ``webhooks-bookings``
    (``booking_events``)."""

    __tablename__ = "notify_cursor"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    last_event_id: Mapped[int] = mapped_column(BigInteger, default=0)
