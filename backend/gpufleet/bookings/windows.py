"""Which GPUs are free over a window, which booking is in the way, and the next window that is free.

A GPU is held over a window when a row of ``booking_gpus`` for it has a non-empty window that overlaps it
(the same test as the database's constraint). GPUs for a booking come from one host: the one asked for,
or the host with the fewest free GPUs that still has enough (so a large block stays whole elsewhere),
its lowest indices first.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.bookings.times import ceil_minute
from gpufleet.db.bookings import Booking, BookingGPU
from gpufleet.db.models import GPU, Host


@dataclass(frozen=True)
class Ask:
    """Where a booking wants its GPUs: how many, on which host (or any), of which model, which indices."""

    count: int
    host_id: uuid.UUID | None = None
    model: str | None = None
    indices: tuple[int, ...] | None = None


def _overlapping(start: datetime, end: datetime):
    return (BookingGPU.start_at < BookingGPU.end_at) & (BookingGPU.start_at < end) & (BookingGPU.end_at > start)


def candidates(sess: Session, ask: Ask) -> list[GPU]:
    q = select(GPU).join(Host, Host.id == GPU.host_id).where(GPU.enabled.is_(True)).order_by(Host.name, GPU.index)
    if ask.host_id is not None:
        q = q.where(GPU.host_id == ask.host_id)
    if ask.model:
        q = q.where(GPU.name == ask.model)
    if ask.indices is not None:
        q = q.where(GPU.index.in_(ask.indices))
    return list(sess.scalars(q))


def held(sess: Session, gpu_ids: list[uuid.UUID], start: datetime, end: datetime) -> list[BookingGPU]:
    if not gpu_ids:
        return []
    return list(sess.scalars(select(BookingGPU).where(BookingGPU.gpu_id.in_(gpu_ids), _overlapping(start, end))
                             .order_by(BookingGPU.start_at)))


def pick(sess: Session, ask: Ask, start: datetime, end: datetime, among: list[GPU] | None = None) -> list[GPU] | None:
    """GPUs on one host free over [start, end) for ``ask``, or None."""
    gpus = candidates(sess, ask) if among is None else among
    taken = {r.gpu_id for r in held(sess, [g.id for g in gpus], start, end)}
    by_host: dict[uuid.UUID, list[GPU]] = {}
    for g in gpus:
        if g.id not in taken:
            by_host.setdefault(g.host_id, []).append(g)
    if ask.indices is not None:
        whole = [free for free in by_host.values() if len(free) == len(ask.indices)]
        return whole[0] if whole else None
    fits = sorted((free for free in by_host.values() if len(free) >= ask.count), key=len)
    return fits[0][: ask.count] if fits else None


def in_the_way(sess: Session, ask: Ask, start: datetime, end: datetime) -> Booking | None:
    """The booking, among those holding GPUs the ask could use, that starts first in the window."""
    rows = held(sess, [g.id for g in candidates(sess, ask)], start, end)
    return sess.get(Booking, rows[0].booking_id) if rows else None


def next_window(sess: Session, ask: Ask, start: datetime, end: datetime,
                until: datetime) -> tuple[datetime, datetime] | None:
    """The first window as long as [start, end), from ``start`` on and starting before ``until``, free for ``ask``.

    A window can only open where one held window ends, so those ends are the only starts tried.
    """
    length = end - start
    gpus = candidates(sess, ask)
    ends = sorted({r.end_at for r in held(sess, [g.id for g in gpus], start, until + length)})
    for begin in [start, *ends]:
        begin = ceil_minute(max(begin, start))
        if begin >= until:
            break
        if pick(sess, ask, begin, begin + length, among=gpus) is not None:
            return begin, begin + length
    return None

