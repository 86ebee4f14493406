"""A booking as the API shows it: instants in UTC, and the same in the reader's zone."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.bookings.service import held_gpus
from gpufleet.bookings.times import zone
from gpufleet.db.bookings import Booking
from gpufleet.db.models import Host
from gpufleet.wire.bookings import BookedGPU, BookingPublic


def state(b: Booking, now: datetime) -> str:
    if b.released_at is not None:
        return "released"
    if now < b.start_at:
        return "upcoming"
    return "active" if now < b.end_at else "ended"


def public(sess: Session, b: Booking, now: datetime, tz_name: str | None = None) -> BookingPublic:
    tz = zone(tz_name or b.time_zone, "tz")
    rows = held_gpus(sess, b)
    names = dict(sess.execute(select(Host.id, Host.name).where(Host.id.in_({r.host_id for r in rows}))).all())
    return BookingPublic(
        id=b.id, owner=b.owner, kind=b.kind, start=b.start_at, end=b.end_at,
        start_local=b.start_at.astimezone(tz).isoformat(timespec="minutes"),
        end_local=b.end_at.astimezone(tz).isoformat(timespec="minutes"), shown_in=tz.key,
        gpu_count=b.gpu_count, gpus=[BookedGPU(host=names.get(r.host_id, "?"), index=r.gpu_index) for r in rows],
        model=b.gpu_model, reason=b.reason, time_zone=b.time_zone, created_by=b.created_by, created_at=b.created_at,
        state=state(b, now),  # type: ignore[arg-type]
        released_at=b.released_at, release_reason=b.release_reason,
    )
