"""Create, list, read and cancel bookings; a member within the admin's limits, an admin for anyone.

Every write runs in the caller's write session (``gpufleet.db.session.write_session``: on SQLite the write
lock is held from the first statement, so the check below and the insert are one step). The check finds
a conflict early to name it; the database's own constraint decides when two bookings race: the insert
runs in a savepoint, and the loser's is refused and reported as the same :class:`Conflict`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpufleet.bookings import windows
from gpufleet.bookings.times import FieldError
from gpufleet.config import SchedulerSettings
from gpufleet.db.bookings import OVERLAP, Booking, BookingGPU, release_rows
from gpufleet.db.models import Host, Quota, User
from gpufleet.users.groups import BookingLimits, booking_limits, group_quotas_of


class Forbidden(PermissionError):
    pass


class NotFound(LookupError):
    pass


@dataclass(frozen=True)
class Holder:
    """The booking in the way, as it was read (a conflict outlives the session that found it)."""

    id: uuid.UUID
    owner: str
    kind: str
    start_at: datetime
    end_at: datetime


class Conflict(Exception):
    """The GPUs asked for are booked over the window: by ``in_the_way``; ``free`` is the next free window."""

    def __init__(self, found: Booking | None, free: tuple[datetime, datetime] | None) -> None:
        in_the_way = Holder(found.id, found.owner, found.kind, found.start_at, found.end_at) if found else None
        self.in_the_way, self.free = in_the_way, free
        who = f"booking {in_the_way.id} of {in_the_way.owner} ({in_the_way.start_at:%Y-%m-%d %H:%M}–" \
              f"{in_the_way.end_at:%Y-%m-%d %H:%M} UTC)" if in_the_way else "another booking"
        nxt = f"; the next free window is {free[0]:%Y-%m-%d %H:%M}–{free[1]:%Y-%m-%d %H:%M} UTC" if free else \
            "; no window as long is free within the furthest-ahead limit"
        super().__init__(f"those GPUs are held by {who}{nxt}")


@dataclass(frozen=True)
class Actor:
    name: str
    admin: bool


@dataclass(frozen=True)
class Wanted:
    """A booking as asked, its window already read (gpufleet.bookings.times.window)."""

    start: datetime
    end: datetime
    gpus: int
    host: str | None = None
    gpu_indices: tuple[int, ...] | None = None
    model: str | None = None
    owner: str | None = None
    kind: str = "booking"
    reason: str | None = None
    time_zone: str = "UTC"


def ask_for(sess: Session, w: Wanted) -> windows.Ask:
    host_id = None
    if w.host is not None:
        host_id = sess.scalar(select(Host.id).where(Host.name == w.host))
        if host_id is None:
            raise FieldError("host", f"no host is called {w.host!r}")
    if w.gpu_indices is not None:
        if host_id is None:
            raise FieldError("gpu_indices", "GPU indices name GPUs of one host: give the host too")
        if len(set(w.gpu_indices)) != w.gpus:
            raise FieldError("gpu_indices", f"{len(set(w.gpu_indices))} distinct indices for {w.gpus} GPUs")
    return windows.Ask(w.gpus, host_id, w.model, w.gpu_indices)


@dataclass(frozen=True)
class Bound:
    """One subject's booking limits, whose bookings they count, and how a refusal names it."""

    limits: BookingLimits
    members: tuple[str, ...]
    group: str | None = None  # None: the owner's own

    @property
    def yours(self) -> str:
        return "your bookings" if self.group is None else f"group {self.group}'s bookings"

    @property
    def whose(self) -> str:
        return "the limit" if self.group is None else "its limit"

    @property
    def of(self) -> str:
        return "" if self.group is None else f" for group {self.group}"


def bounds_of(sess: Session, owner: str, defaults: SchedulerSettings) -> list[Bound]:
    """The owner's own booking limits (their quota's, else the server's defaults), then each group's that sets any."""
    own = sess.scalars(select(Quota).join(User, User.id == Quota.user_id).where(User.name == owner)).one_or_none()
    mine = booking_limits(own) if own is not None else BookingLimits()
    out = [Bound(BookingLimits(
        defaults.booking_hours_per_week if mine.hours_per_week is None else mine.hours_per_week,
        defaults.booking_max_gpus if mine.max_gpus is None else mine.max_gpus,
        defaults.booking_max_hours if mine.max_hours is None else mine.max_hours,
        defaults.booking_max_ahead_days if mine.max_ahead_days is None else mine.max_ahead_days,
    ), (owner,))]
    for gname, quota, members in group_quotas_of(sess, owner):
        limits = booking_limits(quota)
        if limits.any():
            out.append(Bound(limits, tuple(members), gname))
    return out


def _check_limits(sess: Session, owner: str, w: Wanted, defaults: SchedulerSettings, now: datetime) -> None:
    """Refuse a member's booking past her own limits or a group's of hers, naming the field and whose limit."""
    hours = (w.end - w.start).total_seconds() / 3600
    for bound in bounds_of(sess, owner, defaults):
        _check_bound(sess, bound, w, hours, now)


def _check_bound(sess: Session, bound: Bound, w: Wanted, hours: float, now: datetime) -> None:
    lim, whose, group = bound.limits, bound.whose, bound.of
    if lim.max_ahead_days is not None and w.start > now + timedelta(days=lim.max_ahead_days):
        raise FieldError("start", f"bookings start at most {lim.max_ahead_days:g} days ahead{group}")
    if lim.max_hours is not None and hours > lim.max_hours:
        raise FieldError("end", f"a booking lasts at most {lim.max_hours:g} h{group}, not {hours:g} h")
    if lim.max_gpus is None and lim.hours_per_week is None:
        return
    theirs = list(sess.scalars(select(Booking).where(Booking.owner.in_(bound.members),
                                                     Booking.released_at.is_(None),
                                                     Booking.kind == "booking", Booking.end_at > now)))
    at_once = w.gpus + sum(b.gpu_count for b in theirs if b.start_at < w.end and b.end_at > w.start)
    if lim.max_gpus is not None and at_once > lim.max_gpus:
        raise FieldError("gpus", f"{bound.yours} would hold {at_once} GPUs at once; {whose} is {lim.max_gpus}")
    week = w.start - timedelta(days=w.start.weekday(), hours=w.start.hour, minutes=w.start.minute)
    booked = hours * w.gpus + sum((b.end_at - b.start_at).total_seconds() / 3600 * b.gpu_count for b in theirs
                                  if week <= b.start_at < week + timedelta(days=7))
    if lim.hours_per_week is not None and booked > lim.hours_per_week:
        raise FieldError("end", f"{bound.yours} that week would hold {booked:g} GPU-hours; {whose} is "
                                f"{lim.hours_per_week:g}")


def create(sess: Session, actor: Actor, w: Wanted, limits: SchedulerSettings, now: datetime) -> Booking:
    owner = w.owner or actor.name
    if not actor.admin and (owner != actor.name or w.kind != "booking"):
        raise Forbidden("members book for themselves only; an admin books for others and blocks maintenance")
    if w.kind == "booking" and owner != actor.name and sess.scalar(select(User.id).where(User.name == owner)) is None:
        raise FieldError("owner", f"no user is called {owner!r}")
    ask = ask_for(sess, w)
    if not actor.admin:
        _check_limits(sess, owner, w, limits, now)  # (owner is the actor: members book for themselves)
    gpus = windows.pick(sess, ask, w.start, w.end)
    if gpus is None:
        if not windows.candidates(sess, ask):
            raise FieldError("gpus", "no GPUs match what was asked (host, model, indices)")
        raise _conflict(sess, ask, w, limits)
    b = Booking(owner=owner, kind=w.kind, start_at=w.start, end_at=w.end, gpu_count=w.gpus, gpu_model=w.model,
                host_id=ask.host_id, reason=w.reason, time_zone=w.time_zone, created_by=actor.name, created_at=now)
    try:
        with sess.begin_nested():
            sess.add(b)
            sess.flush()
            sess.add_all(BookingGPU(booking_id=b.id, gpu_id=g.id, host_id=g.host_id, gpu_index=g.index,
                                    start_at=w.start, end_at=w.end) for g in gpus)
            sess.flush()
    except IntegrityError as exc:
        if OVERLAP not in str(exc):
            raise
        raise _conflict(sess, ask, w, limits) from None
    return b


def _conflict(sess: Session, ask: windows.Ask, w: Wanted, limits: SchedulerSettings) -> Conflict:
    until = w.start + timedelta(days=limits.booking_max_ahead_days)
    free = windows.next_window(sess, ask, w.start, w.end, until)
    return Conflict(windows.in_the_way(sess, ask, w.start, w.end), free)


def visible(sess: Session, *, owner: str | None = None, since: datetime | None = None,
            until: datetime | None = None, live_only: bool = True) -> list[Booking]:
    """Bookings (everyone's unless ``owner``) whose window meets [since, until), by start."""
    q = select(Booking).order_by(Booking.start_at)
    if owner is not None:
        q = q.where(Booking.owner == owner)
    if live_only:
        q = q.where(Booking.released_at.is_(None))
    if since is not None:
        q = q.where(Booking.end_at > since)
    if until is not None:
        q = q.where(Booking.start_at < until)
    return list(sess.scalars(q))


def get(sess: Session, booking_id: uuid.UUID) -> Booking:
    b = sess.get(Booking, booking_id)
    if b is None:
        raise NotFound(f"no booking {booking_id}")
    return b


def held_gpus(sess: Session, b: Booking) -> list[BookingGPU]:
    return list(sess.scalars(select(BookingGPU).where(BookingGPU.booking_id == b.id).order_by(BookingGPU.gpu_index)))


def release(sess: Session, b: Booking, now: datetime, reason: str, user: str | None = None) -> Booking:
    """End the booking now: its GPUs are free from ``now`` (all of it, when it had not begun)."""
    release_rows(sess, b, now, reason, user)
    return b


def cancel(sess: Session, actor: Actor, booking_id: uuid.UUID, now: datetime) -> Booking:
    b = get(sess, booking_id)
    if not actor.admin and b.owner != actor.name:
        raise Forbidden("you may cancel your own bookings only")
    return release(sess, b, now, f"cancelled by {actor.name}", actor.name)
