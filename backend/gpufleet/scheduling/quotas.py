"""Quotas at placement time: a training past its owner's quota waits, with the reason in words.

Checked by the scheduler for each queued training before it looks for GPUs,
inside the training's reservation transaction, so the count of GPUs held
includes every placement committed before it. A training over quota is never
failed: it stays queued (``wait_reason`` says whose quota and by how much)
and the scheduler goes on to the next training in the queue, so another
user's training starts first.

Limits apply to the owner's own quota and to the quota of every group the
owner is in. GPUs held counts active allocations (a shared placement counts
as one GPU) and the GPUs of every job sent to a Slurm pool and not ended
(pending there or running): one cap over all gpufleet runs for them, which
is also how the pool's submitter (:mod:`gpufleet.pools.submit`) holds back a
training past it. GPU-hours per week counts held time over the last 7 days
on the team's hosts and pools, and, where bookings count as booked
(``GPUFLEET_BOOKING_QUOTA_COUNTS``, ``Counting``), the booked time of the
subject's bookings that its own work did not use.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.db.models import GPUAllocation, Quota, Training, User
from gpufleet.db.pools import PoolJob
from gpufleet.db.types import utcnow
from gpufleet.users.groups import group_quotas_of
from gpufleet.users.usage import held_seconds, unused_booked_seconds

WEEK = timedelta(days=7)
# How a booking counts against a weekly quota (SchedulerSettings.booking_quota_counts).
Counting = Literal["booked", "used"]


def gpus_needed(t: Training) -> int:
    """The GPUs a training will hold once placed (as the scheduler counts them)."""
    if not t.exclusive:
        return 1
    if t.gpu_ids and not t.auto_select:
        return len(t.gpu_ids)
    return t.requested_count or t.world_size or 1


def may_borrow(training: Training) -> bool:
    """Whether an over-quota training may run on idle GPUs anyway (over-quota borrowing).

    Borrowing is safe only when the borrowed GPUs can be taken back, so only a
    preemptible training borrows: a within-quota training that then cannot be
    placed preempts it (:func:`gpufleet.scheduling.preemption.plan` counts
    the running trainings of owners over their quota as victims at equal
    priority), and it resumes from its checkpoint later.
    """
    return bool(training.preemptible)


def borrowing(sess: Session, owner: str, counting: Counting, now: datetime | None = None) -> bool:
    """Whether ``owner`` (or a group of theirs) holds more than its quota now, i.e. runs on borrowed GPUs."""
    now = now or utcnow()
    for _subject, quota, members in _limits_of(sess, owner):
        if quota.max_gpus is not None and _held_gpus(sess, members) > quota.max_gpus:
            return True
        if quota.gpu_hours_per_week is not None and \
                _week_hours(sess, members, now, counting) >= quota.gpu_hours_per_week:
            return True
    return False


def _limits_of(sess: Session, owner: str) -> list[tuple[str, Quota, list[str]]]:
    """(subject words, quota, member names) for the owner's quota and its groups' quotas."""
    user_id = sess.scalars(select(User.id).where(User.name == owner)).first()
    if user_id is None:
        return []
    out: list[tuple[str, Quota, list[str]]] = []
    own = sess.scalars(select(Quota).where(Quota.user_id == user_id)).one_or_none()
    if own is not None and (own.max_gpus is not None or own.gpu_hours_per_week is not None):
        out.append((owner, own, [owner]))
    for gname, quota, members in group_quotas_of(sess, owner):
        if quota.max_gpus is None and quota.gpu_hours_per_week is None:
            continue
        out.append((f"group {gname}", quota, members))
    return out


def _held_gpus(sess: Session, owners: list[str]) -> int:
    team = sess.scalar(
        select(func.count(GPUAllocation.id))
        .join(Training, Training.id == GPUAllocation.training_id)
        .where(GPUAllocation.released_at.is_(None), Training.owner.in_(owners))
    ) or 0
    sent = sess.scalar(
        select(func.coalesce(func.sum(Training.world_size), 0))
        .join(PoolJob, (PoolJob.training_id == Training.id) & (PoolJob.attempt == Training.attempt))
        .where(PoolJob.ended_at.is_(None), Training.owner.in_(owners))
    ) or 0
    return int(team) + int(sent)


def _week_hours(sess: Session, owners: list[str], now: datetime, counting: Counting) -> float:
    return sum(_week_parts(sess, owners, now, counting)) / 3600.0


def _week_parts(sess: Session, owners: list[str], now: datetime, counting: Counting) -> tuple[float, float]:
    """GPU-seconds of the last 7 days: held, and booked but unused (0 where bookings count as used)."""
    held = sum(u.held for u in held_seconds(sess, now - WEEK, now, now, owners).values())
    unused = unused_booked_seconds(sess, now - WEEK, now, owners, now) if counting == "booked" else 0.0
    return held, unused


class PassMemo:
    """Quota refusals within one scheduler pass.

    An owner's use only grows during a pass, so once one of their trainings
    waited for a quota, a later one that needs as many GPUs or more waits for
    the same reason. When its row already says so, the pass skips it without
    a transaction: a long over-quota queue costs one check per owner and pass.
    """

    def __init__(self) -> None:
        self._refused: dict[str, tuple[int, str]] = {}
        self._waiting: set = set()

    def waits(self, training_id: object) -> bool:
        """Whether this pass refused the training for a quota (so it reserves no GPUs for backfill)."""
        return training_id in self._waiting

    def skip(self, t: Training) -> bool:
        hit = self._refused.get(t.owner)
        return hit is not None and gpus_needed(t) >= hit[0] and t.wait_reason == hit[1]

    def note(self, t: Training, reason: str) -> None:
        self._waiting.add(t.id)
        need = gpus_needed(t)
        if t.owner not in self._refused or need < self._refused[t.owner][0]:
            self._refused[t.owner] = (need, reason)


def quota_wait(sess: Session, t: Training, counting: Counting, memo: PassMemo | None = None) -> str | None:
    """The scheduler's hook: the reason ``t`` waits for a quota, unless it may borrow idle GPUs."""
    why = over_quota(sess, t, counting)
    if why is None or may_borrow(t):
        return None
    why += "; a preemptible training may borrow idle GPUs beyond it"
    if memo is not None:
        memo.note(t, why)
    return why


def over_quota(sess: Session, t: Training, counting: Counting, now: datetime | None = None) -> str | None:
    """Why ``t`` must wait for its owner's (or a group's) quota, or None when it may be placed."""
    limits = _limits_of(sess, t.owner)
    if not limits:
        return None
    now = now or utcnow()
    need = gpus_needed(t)
    for subject, quota, members in limits:
        whose = "its" if subject.startswith("group ") else "their"
        if quota.max_gpus is not None:
            held = _held_gpus(sess, members)
            if held + need > quota.max_gpus:
                more = f"; this training needs {need} more" if held < quota.max_gpus else ""
                return f"{subject} holds {held} of {quota.max_gpus} GPUs in {whose} quota{more}"
        if quota.gpu_hours_per_week is not None:
            held_s, unused = _week_parts(sess, members, now, counting)
            hours = (held_s + unused) / 3600.0
            if hours >= quota.gpu_hours_per_week:
                booked = f", with {unused / 3600.0:.1f} booked and unused" if unused > 0 else ""
                return (f"{subject} held {hours:.1f} of {quota.gpu_hours_per_week:g} GPU-hours in the last 7 days"
                        f" ({whose} weekly quota{booked}); it waits until older use leaves the week")
    return None
