"""Bookings as the scheduler honours them: which GPUs of a host a training may not take, and why in words.

A GPU booked by someone else (or blocked for maintenance) is not given to work that would still run when
that booking starts: work may take it before only when it is known to end first, by its ``max_runtime_s``
plus the stop grace (the time it has to checkpoint once it runs past) plus ``MARGIN`` — or, without one, by
the walltime its shape needed before (``scheduling.walltime``) plus ``MARGIN``. From the booking's
start to its end the GPU takes only the booker's own work. Stoppable work (preemptible, exclusive) may take
the GPUs until ``stop_lead`` before the start: then it is asked to stop, as a preemption asks (the stop
contract: it checkpoints within the stop grace), and is requeued, not failed (``stop_ahead``). Other work
with no known end is not placed on a GPU with any booking of another's ahead. The rows are
gpufleet.db.bookings' (the bookings package writes them); ``release_unused`` gives back unused ones, and
``starting_soon`` tells a booker that her booking starts (both as ``booking_events``, which webhooks send).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from gpufleet.db.bookings import STARTING, Booking, BookingEvent, BookingGPU, record, release_rows
from gpufleet.db.models import GPUAllocation, Training
from gpufleet.db.session import rows_changed
from gpufleet.lifecycle.transitions import record_event
from gpufleet.scheduling import walltime
from gpufleet.workkinds import noun

# Slack on a training's own limit before a booking: the scheduler's pass, the launch, the stop itself.
MARGIN = timedelta(minutes=2)


def expected_end(t: Any, now: datetime, stop_grace_s: float, needed_s: float | None = None) -> datetime | None:
    """When ``t``, started now, will have stopped at the latest: by its ``max_runtime_s``, else by what its
    shape needed before (``needed_s``, scheduling.walltime); None when nothing bounds it."""
    if t.max_runtime_s:
        return now + timedelta(seconds=t.max_runtime_s + stop_grace_s) + MARGIN
    if needed_s is not None:
        return now + timedelta(seconds=needed_s) + MARGIN
    return None


def stop_lead(stop_grace_s: float) -> timedelta:
    """How long before a booking's start stoppable work on its GPUs is asked to stop: the grace it has to
    write its checkpoint, and the margin."""
    return timedelta(seconds=stop_grace_s) + MARGIN


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.3g} h"


def _why(b: Booking, index: int, t: Any, now: datetime, needed_s: float | None) -> str:
    who = "blocked for maintenance" if b.kind == "maintenance" else f"booked by {b.owner}"
    if b.start_at <= now:
        return f"GPU {index} is {who} until {b.end_at:%Y-%m-%d %H:%M} UTC"
    if t.max_runtime_s:
        return (f"GPU {index} is {who} from {b.start_at:%Y-%m-%d %H:%M} UTC; this {noun(t.kind)}'s "
                f"{_hours(t.max_runtime_s)} would run into it")
    if needed_s is not None:
        return (f"GPU {index} is {who} from {b.start_at:%Y-%m-%d %H:%M} UTC; this {noun(t.kind)}'s shape needed "
                f"up to {_hours(needed_s)} before (with a margin), which would run into it")
    return (f"GPU {index} is {who} from {b.start_at:%Y-%m-%d %H:%M} UTC; this {noun(t.kind)} has no "
            f"max_runtime_s and no earlier run of its shape, so it cannot be shown to end before")


def booked_away(sess: Session, t: Any, host_id: uuid.UUID, now: datetime, stop_grace_s: float) -> dict[int, str]:
    """The GPUs (by index) of ``host_id`` that bookings keep from ``t`` now, each with why."""
    q = (select(BookingGPU.gpu_index, Booking).join(Booking, Booking.id == BookingGPU.booking_id)
         .where(BookingGPU.host_id == host_id, BookingGPU.start_at < BookingGPU.end_at, BookingGPU.end_at > now)
         .order_by(BookingGPU.start_at))
    rows = [(index, b) for index, b in sess.execute(q).all() if not (b.kind == "booking" and b.owner == t.owner)]
    if not rows:
        return {}  # none of another's: nothing to judge (and no history to read)
    needed = walltime.needed_s(sess, t) if not t.max_runtime_s else None
    until = expected_end(t, now, stop_grace_s, needed)
    stoppable = bool(t.preemptible and t.exclusive)
    lead = stop_lead(stop_grace_s)
    out: dict[int, str] = {}
    for index, b in rows:
        if until is not None and b.start_at >= until:
            continue  # it ends first
        if stoppable and now + lead < b.start_at:
            continue  # it is asked to stop ahead (stop_ahead), its checkpoint written before the start
        out.setdefault(index, _why(b, index, t, now, needed))
    return out


def windows_of_others(sess: Session, t: Any, host_ids: Sequence[uuid.UUID],
                      now: datetime) -> dict[tuple[uuid.UUID, int], list[tuple[datetime, datetime]]]:
    """The windows, by start, that bookings of others (and maintenance) hold GPUs of ``host_ids`` from now on,
    per (host, GPU index): what ``t`` must not run into."""
    if not host_ids:
        return {}
    rows = sess.execute(
        select(BookingGPU.host_id, BookingGPU.gpu_index, BookingGPU.start_at, BookingGPU.end_at, Booking.kind,
               Booking.owner).join(Booking, Booking.id == BookingGPU.booking_id)
        .where(BookingGPU.host_id.in_(list(host_ids)), BookingGPU.start_at < BookingGPU.end_at,
               BookingGPU.end_at > now).order_by(BookingGPU.start_at)).all()
    out: dict[tuple[uuid.UUID, int], list[tuple[datetime, datetime]]] = {}
    for host_id, index, start, end, kind, owner in rows:
        if not (kind == "booking" and owner == t.owner):
            out.setdefault((host_id, index), []).append((start, end))
    return out


def past_bookings(t: Any, free_at: datetime, windows: Sequence[tuple[datetime, datetime]], now: datetime,
                  stop_grace_s: float, needed_s: float | None = None) -> datetime:
    """The first moment from ``free_at`` at which ``t`` may take a GPU held by ``windows`` (others' bookings,
    by start), by the rules the scheduler places by: known to end before the next one, or stoppable until its
    stop lead before it; work of neither kind only after the last."""
    ends = expected_end(t, now, stop_grace_s, needed_s)
    length = ends - now if ends is not None else None
    stoppable = bool(t.preemptible and t.exclusive)
    lead = stop_lead(stop_grace_s)
    when = free_at
    for start, end in windows:
        if end <= when:
            continue
        if length is not None:
            clash = when + length > start
        else:
            clash = not stoppable or when + lead >= start
        if clash:
            when = end
    return when


def mark(states: Sequence[Any], away: dict[int, str]) -> None:
    """Each GPU state the bookings keep from this training says so (reservation.GPUState.booked)."""
    for st in states:
        if st.index in away:
            st.booked = away[st.index]


def release_unused(sess: Session, now: datetime, grace_s: float) -> list[Booking]:
    """Release the rest of each booking whose GPUs ran none of the booker's work in its first ``grace_s``.

    Work of the booker's counts when it held one of the booked GPUs at any time from the booking's start
    until now. Maintenance windows are never released. Returns the bookings released (the caller tells)."""
    due = sess.scalars(select(Booking).where(
        Booking.kind == "booking", Booking.released_at.is_(None), Booking.end_at > now,
        Booking.start_at <= now - timedelta(seconds=grace_s)))
    released = []
    for b in due:
        gpu_ids = select(BookingGPU.gpu_id).where(BookingGPU.booking_id == b.id)
        used = sess.scalar(select(GPUAllocation.id).join(Training, Training.id == GPUAllocation.training_id).where(
            GPUAllocation.gpu_id.in_(gpu_ids), Training.owner == b.owner, GPUAllocation.allocated_at < now,
            or_(GPUAllocation.released_at.is_(None), GPUAllocation.released_at > b.start_at)).limit(1))
        if used is None:
            release_rows(sess, b, now, f"released unused: none of {b.owner}'s work ran on it in the first "
                                       f"{grace_s / 60:g} min")
            released.append(b)
    return released


def starting_soon(sess: Session, now: datetime, lead_s: float, grace_s: float) -> list[Booking]:
    """Tell each booker whose booking starts within ``lead_s`` (or has started, and is not over) that it does:
    one ``booking_starting`` event per booking, however many passes or servers see it. Returns those told."""
    told = select(BookingEvent.booking_id).where(BookingEvent.kind == STARTING)
    due = sess.scalars(select(Booking).where(
        Booking.kind == "booking", Booking.released_at.is_(None), Booking.end_at > now,
        Booking.start_at <= now + timedelta(seconds=lead_s), Booking.id.not_in(told)).order_by(Booking.start_at))
    return [b for b in due if record(sess, b, STARTING, starts_at(b, now, grace_s))]


def starts_at(b: Booking, now: datetime, grace_s: float) -> str:
    """When ``b`` starts (or started) and ends, in the zone it was booked in (and UTC), and when it is
    released if unused."""
    try:
        tz = ZoneInfo(b.time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        tz = ZoneInfo("UTC")
    local = f"{b.start_at.astimezone(tz):%Y-%m-%d %H:%M} {tz.key}"
    utc = "" if tz.key == "UTC" else f" ({b.start_at:%H:%M} UTC)"
    verb = "started" if b.start_at <= now else "starts"
    return (f"{b.gpu_count} GPU{'s' if b.gpu_count != 1 else ''} {verb} at {local}{utc}, held until "
            f"{b.end_at.astimezone(tz):%Y-%m-%d %H:%M}; if none of {b.owner}'s work runs on them in its first "
            f"{grace_s / 60:g} min, the rest is released")


def stop_ahead(sess: Session, now: datetime, stop_grace_s: float) -> list[tuple[Training, Booking]]:
    """Ask running stoppable work on GPUs that another's booking takes within ``stop_lead`` to stop now.

    As a preemption asks (``preempted_by``, here the booking's id): the worker has the training checkpoint
    and stop within the stop grace, it ends ``preempted``, and preemption.settle requeues it to resume."""
    q = (select(Training, Booking).join(GPUAllocation, GPUAllocation.training_id == Training.id)
         .join(BookingGPU, BookingGPU.gpu_id == GPUAllocation.gpu_id).join(Booking, Booking.id == BookingGPU.booking_id)
         .where(GPUAllocation.released_at.is_(None), Training.status == "running", Training.preemptible.is_(True),
                Training.preempted_by.is_(None), Training.cancel_requested.is_(False),
                BookingGPU.start_at < BookingGPU.end_at, BookingGPU.end_at > now,
                BookingGPU.start_at <= now + stop_lead(stop_grace_s),
                or_(Booking.kind == "maintenance", Booking.owner != Training.owner)))
    asked: list[tuple[Training, Booking]] = []
    for t, b in sess.execute(q).all():
        if any(t.id == a.id for a, _ in asked):
            continue
        done = sess.execute(update(Training).where(Training.id == t.id, Training.status == "running",
                                                   Training.preempted_by.is_(None))
                            .values(preempted_by=b.id).execution_options(synchronize_session=False))
        if rows_changed(done) != 1:
            continue
        record_event(sess, t.id, "preempt", status="running",
                     reason=f"{held_for(b)}: checkpointing and stopping ahead of it; it resumes later "
                            f"(not counted as a restart)", data={"booking": str(b.id)})
        asked.append((t, b))
    return asked


def held_for(b: Booking) -> str:
    who = "blocked for maintenance" if b.kind == "maintenance" else f"booked by {b.owner}"
    return f"its GPUs are {who} from {b.start_at:%Y-%m-%d %H:%M} UTC (booking {str(b.id)[:8]})"


def live_holds(sess: Session, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
    """Of ``ids`` (trainings' ``preempted_by``), those that are live bookings, each with what it holds."""
    if not ids:
        return {}
    found = sess.scalars(select(Booking).where(Booking.id.in_(list(ids)), Booking.released_at.is_(None)))
    return {b.id: held_for(b) for b in found}
