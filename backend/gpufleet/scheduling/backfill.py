"""Backfill: lower-priority trainings use GPUs a waiting higher-priority one needs only if they cannot delay it.

Each scheduling pass notes the first ``MAX_RESERVATIONS`` trainings that wait
(exclusive ones, in queue order). For each, when a training of lower priority
is about to take GPUs, it works out a reservation: the host where enough GPUs
for it free up soonest, which GPUs, and when (:func:`reservation`). The time
a busy GPU frees up is the expected end of every training holding it:

- its ``max_runtime_s`` from the start of its attempt (plus the stop grace,
  the time it has to checkpoint once it runs past), and
- its measured progress: the steps left at the rate of the last few minutes,

whichever comes first; a training with neither never frees its GPUs as far as
the reservation can tell. A GPU that another's booking holds (or a maintenance
window) frees up for the waiting training only where its run fits around
that booking, by the rules the scheduler places by (``scheduling.bookings``):
so a training's expected start counts the bookings in its way. A lower-priority training may take GPUs of a
reservation only if it will end before they are all free: by its own
``max_runtime_s``, which the supervisor enforces. Otherwise it waits, and its
``wait_reason`` says behind whom and why. GPUs outside every reservation are
free for anyone.

This is the conservative form of EASY backfill (Lifka, 1995; Slurm's
``sched/backfill``): no training is ever started earlier at the cost of one
of higher priority.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.config import WorkerSettings
from gpufleet.db.models import (
    GPU,
    GPUAllocation,
    Host,
    Training,
    TrainingEvent,
    TrainingMetric,
)
from gpufleet.db.types import utcnow
from gpufleet.scheduling import bookings, walltime

# Reservations per pass; a queue waits behind its head, not behind every row.
MAX_RESERVATIONS = 8
# Progress is measured over the steps of the last few minutes.
RATE_WINDOW = timedelta(minutes=5)


@dataclass(frozen=True)
class Reservation:
    training_id: uuid.UUID
    name: str
    priority: int
    count: int
    host_id: uuid.UUID
    gpus: frozenset[int]
    free_at: datetime | None  # None: a holder's end cannot be foreseen


def _fmt_wait(delta: timedelta) -> str:
    s = max(0, int(delta.total_seconds()))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def expected_ends(sess: Session, settings: WorkerSettings, holders: Sequence[Training],
                  now: datetime) -> dict[uuid.UUID, datetime | None]:
    """When each GPU-holding training is expected to end (None: cannot say)."""
    ids = [h.id for h in holders]
    if not ids:
        return {}
    started = dict(sess.execute(
        select(TrainingEvent.training_id, func.max(TrainingEvent.time))
        .where(TrainingEvent.training_id.in_(ids), TrainingEvent.kind == "status",
               TrainingEvent.status == "running").group_by(TrainingEvent.training_id)).all())
    rates = {}
    for tid, lo, hi, t0, t1 in sess.execute(
        select(TrainingMetric.training_id, func.min(TrainingMetric.step), func.max(TrainingMetric.step),
               func.min(TrainingMetric.time), func.max(TrainingMetric.time))
        .where(TrainingMetric.training_id.in_(ids), TrainingMetric.time >= now - RATE_WINDOW)
        .group_by(TrainingMetric.training_id)):
        secs = (t1 - t0).total_seconds() if t0 and t1 else 0.0
        if hi > lo and secs > 0:
            rates[tid] = (hi - lo) / secs
    grace = timedelta(seconds=settings.stop_grace_s)
    out: dict[uuid.UUID, datetime | None] = {}
    for h in holders:
        ends = []
        if h.max_runtime_s:
            begun = started.get(h.id) if h.status == "running" else None
            ends.append((begun or now) + timedelta(seconds=h.max_runtime_s) + grace)
        if h.status == "running" and h.preempted_by is not None:
            ends.append(now + grace)  # asked to make room: it checkpoints and stops
        if h.status == "running" and h.max_steps and h.id in rates:
            ends.append(now + timedelta(seconds=max(0, h.max_steps - h.step) / rates[h.id]))
        out[h.id] = min(ends) if ends else None
    return out


def reservation(sess: Session, settings: WorkerSettings, t: Training, hosts: Sequence[Host],
                now: datetime) -> Reservation | None:
    """Where and when ``t`` can start soonest, with the GPUs it will take; None when it needs no reservation."""
    count = t.requested_count or t.world_size or 1
    host_ids = [h.id for h in hosts]
    if not t.exclusive or not host_ids:
        return None
    gpus = list(sess.execute(select(GPU).where(GPU.host_id.in_(host_ids))).scalars())
    allocs = sess.execute(
        select(GPUAllocation.gpu_id, Training)
        .join(Training, Training.id == GPUAllocation.training_id)
        .where(GPUAllocation.host_id.in_(host_ids), GPUAllocation.released_at.is_(None))).all()
    holders_of: dict[uuid.UUID, list[Training]] = {}
    for gpu_id, holder in allocs:
        holders_of.setdefault(gpu_id, []).append(holder)
    ends = expected_ends(sess, settings, list({h.id: h for _, h in allocs}.values()), now)
    booked = bookings.windows_of_others(sess, t, host_ids, now)
    needed = walltime.needed_s(sess, t) if booked and not t.max_runtime_s else None
    best: Reservation | None = None
    for host in hosts:
        usable = [g for g in gpus if g.host_id == host.id and g.enabled and not g.drained and g.status == "ok"
                  and not (t.memory_estimate and g.memory_total and t.memory_estimate > g.memory_total)]
        if t.gpu_ids and not t.auto_select:
            usable = [g for g in usable if g.index in t.gpu_ids]
            if len(usable) < len(t.gpu_ids):
                continue
        free_at: dict[int, datetime | None] = {}
        for g in usable:
            holders = [h for h in holders_of.get(g.id, []) if h.id != t.id]
            times = [e for e in (ends.get(h.id) for h in holders) if e is not None]
            # Kept for a preemptor: those GPUs are its, never this one's to count on.
            kept = any(h.status == "preempted" and h.preempted_by != t.id for h in holders)
            when = None if kept or len(times) < len(holders) else max(times, default=now)
            if when is not None and (host.id, g.index) in booked:
                when = bookings.past_bookings(t, when, booked[(host.id, g.index)], now, settings.stop_grace_s, needed)
            free_at[g.index] = when
        if len(free_at) < count or sum(1 for v in free_at.values() if v == now) >= count:
            continue  # can never fit here, or it waits for something other than GPUs (it would be placed)
        order = sorted(free_at, key=lambda i: (free_at[i] is None, free_at[i] or now, i))[:count]
        known = [w for w in (free_at[i] for i in order) if w is not None]
        when = max(known) if len(known) == len(order) else None  # None: some GPU's end is not known
        r = Reservation(t.id, t.name, t.priority, count, host.id, frozenset(order), when)
        if best is None or (best.free_at is None and r.free_at is not None) or (
                r.free_at is not None and best.free_at is not None and r.free_at < best.free_at):
            best = r
    return best


@dataclass
class Pass:
    """The reservations of one scheduling pass, worked out when first needed."""

    settings: WorkerSettings
    hosts_for: Callable[[Session, Training], list[Host]]
    now: datetime = field(default_factory=utcnow)
    _waiting: list[Training] = field(default_factory=list)
    _done: dict[uuid.UUID, Reservation | None] = field(default_factory=dict)

    def waiting(self, t: Training) -> None:
        if t.exclusive and len(self._waiting) < MAX_RESERVATIONS and all(w.id != t.id for w in self._waiting):
            self._waiting.append(t)

    def blocks(self, sess: Session, t: Training, host: Host, chosen: Sequence[int]) -> str | None:
        """Why ``t`` may not take ``chosen`` on ``host`` now, or None when it delays nobody."""
        for w in self._waiting:
            if w.priority <= t.priority:
                continue
            if w.id not in self._done:
                self._done[w.id] = reservation(sess, self.settings, w, self.hosts_for(sess, w), self.now)
            r = self._done[w.id]
            if r is None or r.host_id != host.id or not r.gpus & set(chosen):
                continue
            when = f"they free up in about {_fmt_wait(r.free_at - self.now)}" if r.free_at else \
                "they free up (no end can be foreseen for a training holding them)"
            who = f"waits behind higher-priority {r.name} ({str(r.training_id)[:8]}), which needs {r.count} GPU(s)"
            if not t.max_runtime_s:
                return f"{who}; has no max_runtime_s, so it cannot be shown to finish before {when}"
            # It may run that long, then has the stop grace to checkpoint.
            end = self.now + timedelta(seconds=t.max_runtime_s + self.settings.stop_grace_s)
            if r.free_at is None or end > r.free_at:
                return f"{who}; would not finish (max_runtime_s {t.max_runtime_s}) before {when}"
        return None
