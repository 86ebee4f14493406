"""Usage accounting: GPU-seconds per training, user and group, per UTC day.

Two measures:

- **held**: the time a GPU was reserved for a training, from its allocation
  (``gpu_allocations.allocated_at`` to ``released_at``, or now while held).
  One GPU for one hour is 3600 GPU-seconds, whatever the training did with it.
  A training on a Slurm pool holds its job's GPUs from Slurm's start of the job
  to its end, as Slurm's own accounting records them (``pool_jobs``; see
  gpufleet.jobs.pool_watch.account); that part is also reported on its own.
- **used**: held time weighted by the GPU's utilisation, from the one-minute
  rollups of the metrics history (``utilization_avg`` / 100 × the seconds of
  each rolled-up minute that the allocation held). It lags by the maintenance interval
  that writes the rollups.

The allocations are the source of truth and are never deleted; rollups expire
after ``rollup_retention_days``. :func:`store_usage` keeps one row per
training and day in ``usage_daily`` (the agent's maintenance pass calls it),
so the used time of a day outlives its rollups. A report merges what is
stored with what the sources say now, taking the larger of the two for each
training and day: both only grow until a source expires.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone

from sqlalchemy import Interval, and_, func, literal, or_, select
from sqlalchemy.orm import Session

from gpufleet.db.bookings import Booking, BookingGPU
from gpufleet.db.models import GPUAllocation, GPUMetricsRollup, Training, UsageDaily
from gpufleet.db.pools import PoolJob
from gpufleet.db.types import utcnow

BY = ("user", "group", "training")
NO_GROUP = "(no group)"
# A report spans at most this many days, so one request stays one bounded query.
MAX_DAYS = 366
Key = tuple[date, uuid.UUID]
# The length of one rollup (gpu_metrics_rollup.bucket is its start).
BUCKET = timedelta(minutes=1)


class UsageError(ValueError):
    """A usage question that cannot be answered as asked; the message says what to fix."""


@dataclass
class TrainingUsage:
    owner: str
    held: float = 0.0
    used: float = 0.0
    pool: float = 0.0  # the part of held that was on a Slurm pool (no utilisation is known there)


@dataclass(frozen=True)
class UsageRow:
    day: date
    name: str  # a user, a group, NO_GROUP, or a training id
    gpu_seconds_held: float
    gpu_seconds_used: float
    trainings: int
    gpu_seconds_pool: float = 0.0
    gpu_seconds_booked: float = 0.0  # GPU time the name's bookings held (up to now)
    gpu_seconds_booked_used: float = 0.0  # of it, what the booker's own work held on those GPUs then


def day_start(d: date) -> datetime:
    return datetime.combine(d, time(), tzinfo=timezone.utc)


def _split_by_day(lo: datetime, hi: datetime) -> list[tuple[date, float]]:
    out = []
    while lo < hi:
        nxt = min(hi, day_start(lo.date() + timedelta(days=1)))
        out.append((lo.date(), (nxt - lo).total_seconds()))
        lo = nxt
    return out


def _overlapping(lo: datetime, hi: datetime):
    return and_(GPUAllocation.allocated_at < hi,
                or_(GPUAllocation.released_at.is_(None), GPUAllocation.released_at > lo))


def held_seconds(session: Session, lo: datetime, hi: datetime, now: datetime | None = None,
                 owners: list[str] | None = None) -> dict[Key, TrainingUsage]:
    """Held GPU-seconds per (day, training) within [lo, hi) (of ``owners`` only, when given)."""
    now = now or utcnow()
    out: dict[Key, TrainingUsage] = {}
    stmt = (
        select(GPUAllocation.training_id, Training.owner, GPUAllocation.allocated_at, GPUAllocation.released_at)
        .join(Training, Training.id == GPUAllocation.training_id)
        .where(_overlapping(lo, hi))
    )
    if owners is not None:
        stmt = stmt.where(Training.owner.in_(owners))
    for tid, owner, start, end in session.execute(stmt):
        a, b = max(start, lo), min(end or now, hi)
        for day, seconds in _split_by_day(a, b):
            out.setdefault((day, tid), TrainingUsage(owner)).held += seconds
    _add_pool_seconds(session, out, lo, hi, now, owners)
    return out


def _add_pool_seconds(session: Session, out: dict[Key, TrainingUsage], lo: datetime, hi: datetime, now: datetime,
                      owners: list[str] | None) -> None:
    """The GPU-seconds of jobs sent to a Slurm pool: its GPUs, from Slurm's start of the job to its end."""
    j = PoolJob
    stmt = (select(j.training_id, Training.owner, j.run_start, j.run_end, j.gpus)
            .join(Training, Training.id == j.training_id)
            .where(j.run_start.is_not(None), j.run_start < hi, or_(j.run_end.is_(None), j.run_end > lo)))
    if owners is not None:
        stmt = stmt.where(Training.owner.in_(owners))
    for tid, owner, start, end, gpus in session.execute(stmt):
        if start is None:  # the statement reads only jobs Slurm started
            continue
        a, b = max(start, lo), min(end or now, hi)
        for day, seconds in _split_by_day(a, b):
            u = out.setdefault((day, tid), TrainingUsage(owner))
            u.held += seconds * (gpus or 0)
            u.pool += seconds * (gpus or 0)


def _minute_before(col, dialect: str):
    """``col`` less one minute, in SQL (SQLite keeps timestamps as text)."""
    return func.datetime(col, "-60 seconds") if dialect == "sqlite" else col - literal(BUCKET, Interval())


@dataclass
class Booked:
    booked: float = 0.0  # GPU-seconds booked
    used: float = 0.0  # of them, GPU-seconds the booker's own work held on the booked GPUs


def booked_seconds(session: Session, lo: datetime, hi: datetime, now: datetime | None = None,
                   owners: list[str] | None = None) -> dict[tuple[date, str], Booked]:
    """Booked GPU-seconds per (day, owner) within [lo, hi) and up to now, and the part of them the owner's own
    work used: each booked GPU's window (ended at its cancel or release, so what was given back is not
    booked) against the owner's allocations of that GPU in it, two of hers at once on a shared GPU counted
    once. Maintenance windows are nobody's."""
    now = now or utcnow()
    hi = min(hi, now)
    if hi <= lo:
        return {}
    b, g = Booking, BookingGPU
    stmt = (select(b.owner, g.gpu_id, g.start_at, g.end_at).join(b, b.id == g.booking_id)
            .where(b.kind == "booking", g.start_at < hi, g.end_at > lo, g.end_at > g.start_at))
    if owners is not None:
        stmt = stmt.where(b.owner.in_(owners))
    windows = list(session.execute(stmt))
    out: dict[tuple[date, str], Booked] = {}
    for owner, _gpu, start, end in windows:
        for day, seconds in _split_by_day(max(start, lo), min(end, hi)):
            out.setdefault((day, owner), Booked()).booked += seconds
    if not windows:
        return out
    a = GPUAllocation
    spans: dict[tuple[str, uuid.UUID], list[tuple[datetime, datetime]]] = defaultdict(list)
    for owner, gpu, began, ended in session.execute(
            select(Training.owner, a.gpu_id, a.allocated_at, a.released_at).join(Training, Training.id == a.training_id)
            .where(a.gpu_id.in_({w.gpu_id for w in windows}), _overlapping(lo, hi))):
        spans[(owner, gpu)].append((began, ended or now))
    for owner, gpu, start, end in windows:
        w0, w1 = max(start, lo), min(end, hi)
        for s, e in _merged([(max(s, w0), min(e, w1)) for s, e in spans.get((owner, gpu), []) if s < w1 and e > w0]):
            for day, seconds in _split_by_day(s, e):
                out.setdefault((day, owner), Booked()).used += seconds
    return out


def _merged(spans: list[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    out: list[tuple[datetime, datetime]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def unused_booked_seconds(session: Session, lo: datetime, hi: datetime, owners: list[str],
                          now: datetime | None = None) -> float:
    """Booked GPU-seconds of ``owners`` in [lo, hi) that their own work did not use (what a quota counting
    bookings as booked adds to the GPU time held)."""
    return sum(max(0.0, x.booked - x.used) for x in booked_seconds(session, lo, hi, now, owners).values())


def add_used_seconds(session: Session, usage: dict[Key, TrainingUsage], lo: datetime, hi: datetime,
                     now: datetime | None = None) -> None:
    """Add utilisation-weighted GPU-seconds from the rollups of each allocation's GPU and time.

    A rollup minute counts for the part of it the allocation held (and that lies
    in [lo, hi)): an allocation of 17 s inside one minute uses at most 17 s, and
    one that starts mid-minute still counts that minute.
    """
    now = now or utcnow()
    r, a = GPUMetricsRollup, GPUAllocation
    rows = session.execute(
        select(a.training_id, Training.owner, a.allocated_at, a.released_at, r.bucket, r.utilization_avg)
        .join(Training, Training.id == a.training_id)
        .join(r, and_(r.host_id == a.host_id, r.gpu_index == a.gpu_index,
                      r.bucket > _minute_before(a.allocated_at, session.get_bind().dialect.name),
                      or_(a.released_at.is_(None), r.bucket < a.released_at)))
        .where(_overlapping(lo, hi), r.bucket > lo - BUCKET, r.bucket < min(hi, now))
    )
    for tid, owner, start, end, bucket, util in rows:
        held = (min(bucket + BUCKET, end or now, hi) - max(bucket, start, lo)).total_seconds()
        if held <= 0:
            continue
        share = max(0.0, min(100.0, util or 0.0)) / 100.0
        usage.setdefault((bucket.date(), tid), TrainingUsage(owner)).used += held * share


def live_usage(session: Session, lo: datetime, hi: datetime, now: datetime | None = None) -> dict[Key, TrainingUsage]:
    usage = held_seconds(session, lo, hi, now)
    add_used_seconds(session, usage, lo, hi, now)
    return usage


def _stored(session: Session, first: date, last: date) -> dict[Key, TrainingUsage]:
    rows = session.scalars(select(UsageDaily).where(UsageDaily.day >= first, UsageDaily.day <= last))
    return {(u.day, u.training_id): TrainingUsage(u.owner, u.gpu_seconds_held, u.gpu_seconds_used) for u in rows}


def merged_usage(session: Session, first: date, last: date, now: datetime | None = None) -> dict[Key, TrainingUsage]:
    """Per (day, training) for the days first..last: stored rows and the sources, the larger of each."""
    out = _stored(session, first, last)
    for key, live in live_usage(session, day_start(first), day_start(last + timedelta(days=1)), now).items():
        have = out.get(key)
        if have is None:
            out[key] = live
        else:
            have.held, have.used = max(have.held, live.held), max(have.used, live.used)
            have.pool = live.pool
    return out


def store_usage(session: Session, first: date, last: date, now: datetime | None = None) -> int:
    """Write ``usage_daily`` for the days first..last (idempotent; a stored figure never shrinks)."""
    stored = {(u.day, u.training_id): u for u in
              session.scalars(select(UsageDaily).where(UsageDaily.day >= first, UsageDaily.day <= last))}
    n = 0
    for (day, tid), live in live_usage(session, day_start(first), day_start(last + timedelta(days=1)), now).items():
        row = stored.get((day, tid))
        if row is None:
            session.add(UsageDaily(day=day, training_id=tid, owner=live.owner,
                                   gpu_seconds_held=live.held, gpu_seconds_used=live.used))
        else:
            row.gpu_seconds_held = max(row.gpu_seconds_held, live.held)
            row.gpu_seconds_used = max(row.gpu_seconds_used, live.used)
        n += 1
    session.flush()
    return n


def parse_day(name: str, value: str | None, default: date) -> date:
    if value is None or value == "":
        return default
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise UsageError(f"{name}={value!r} is not a day; use YYYY-MM-DD such as 2026-11-21") from None


def check_range(by: str, first: date, last: date) -> None:
    if by not in BY:
        raise UsageError(f"by={by!r} is not one of {', '.join(BY)}")
    if last < first:
        raise UsageError(f"to={last} is before from={first}; give from <= to")
    if (last - first).days + 1 > MAX_DAYS:
        raise UsageError(f"from..to spans {(last - first).days + 1} days; ask for at most {MAX_DAYS}")


def usage_report(session: Session, by: str, first: date, last: date, now: datetime | None = None) -> list[UsageRow]:
    """GPU-seconds held and used per day and user (or group, or training id), days first..last inclusive."""
    from gpufleet.users.groups import groups_of_users

    check_range(by, first, last)
    per = merged_usage(session, first, last, now)
    booked = booked_seconds(session, day_start(first), day_start(last + timedelta(days=1)), now) \
        if by != "training" else {}
    owners = {u.owner for u in per.values()} | {o for _, o in booked}
    groups = groups_of_users(session, sorted(owners)) if by == "group" else {}
    sums: dict[tuple[date, str], list[float]] = defaultdict(lambda: [0.0] * 6)
    for (day, tid), u in per.items():
        names = {"user": [u.owner], "training": [str(tid)]}.get(by) or groups.get(u.owner) or [NO_GROUP]
        for name in names:
            s = sums[(day, name)]
            s[0] += u.held
            s[1] += u.used
            s[2] += 1
            s[3] += u.pool
    for (day, owner), x in booked.items():  # a booking is its owner's (and each group's of theirs), no training's
        for name in ([owner] if by == "user" else groups.get(owner) or [NO_GROUP]):
            s = sums[(day, name)]
            s[4] += x.booked
            s[5] += x.used
    return [UsageRow(day, name, round(h, 3), round(u, 3), int(n), round(p, 3), round(bk, 3), round(bu, 3))
            for (day, name), (h, u, n, p, bk, bu) in sorted(sums.items())]


def row_fields(r: UsageRow) -> dict[str, str | int | float]:
    """A row's name and figures as the API and the CLI give them: each figure in GPU-seconds and GPU-hours."""
    out: dict[str, str | int | float] = {"name": r.name, "trainings": r.trainings}
    for part, seconds in (("held", r.gpu_seconds_held), ("used", r.gpu_seconds_used), ("pool", r.gpu_seconds_pool),
                          ("booked", r.gpu_seconds_booked), ("booked_used", r.gpu_seconds_booked_used)):
        out[f"gpu_seconds_{part}"], out[f"gpu_hours_{part}"] = seconds, round(seconds / 3600, 4)
    return out


UNKNOWN_TRAINING = "(no such training)"


def stored_by(session: Session, by: str, per_training: dict[str, int]) -> list[tuple[str, int]]:
    """The checkpoint store's bytes per user (or group, or training id), largest first, from its bytes per
    training id: a training's bytes count for its owner, and for each group of the owner's (as GPU time
    does); a folder that names no training here counts as UNKNOWN_TRAINING."""
    from gpufleet.users.groups import groups_of_users

    if by not in BY:
        raise UsageError(f"by={by!r} is not one of {', '.join(BY)}")
    ids = {}
    for key in per_training:
        try:
            ids[uuid.UUID(key)] = key
        except ValueError:
            continue
    owners = {ids[tid]: owner for tid, owner in session.execute(
        select(Training.id, Training.owner).where(Training.id.in_(list(ids))))} if ids else {}
    groups = groups_of_users(session, sorted(set(owners.values()))) if by == "group" else {}
    sums: dict[str, int] = defaultdict(int)
    for key, size in per_training.items():
        owner = owners.get(key)
        if by == "training":
            names = [key]
        elif owner is None:
            names = [UNKNOWN_TRAINING]
        else:
            names = [owner] if by == "user" else groups.get(owner) or [NO_GROUP]
        for name in names:
            sums[name] += size
    return sorted(sums.items(), key=lambda kv: (-kv[1], kv[0]))


def totals_by_user(session: Session) -> dict[str, tuple[float, float]]:
    """Every user's stored GPU-seconds (held, used) over all days, for the Prometheus counters."""
    rows = session.execute(select(UsageDaily.owner, func.sum(UsageDaily.gpu_seconds_held),
                                  func.sum(UsageDaily.gpu_seconds_used)).group_by(UsageDaily.owner))
    return {owner: (float(held or 0), float(used or 0)) for owner, held, used in rows}
