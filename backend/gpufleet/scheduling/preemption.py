"""Preemption with checkpoint: a higher-priority training takes GPUs from preemptible lower ones.

When the scheduler cannot place a training (:func:`plan`), it looks for
running, preemptible, exclusive trainings of lower priority whose GPUs would
let it start, and asks the fewest of them to stop: it sets their
``preempted_by``. Each victim's supervisor reads that flag when it renews its
lease (as it reads ``cancel_requested``), sends its launcher SIGTERM (the ranks
checkpoint, as on a worker's stop), and writes ``preempted``. A preempted
training keeps its GPU reservation: no third training can take those GPUs.
The next pass gives them to the preemptor (:func:`take_over`) and, in the same
transaction, puts the victim back in the queue to resume from its checkpoint
(a ``retry`` of kind ``preempted``, not counted as a restart).

Victims are chosen lowest priority first, then furthest over their owner's
fair share (:func:`gpufleet.scheduling.fairshare.over_share`; a test may
plug its own with :func:`set_share_excess`), then least work lost: the
shortest time since their last checkpoint (or their start).

Over-quota borrowing: a preemptible training may run beyond its owner's quota
on GPUs nobody else wants (:func:`gpufleet.scheduling.quotas.may_borrow`).
A training within its quota that then cannot be placed may preempt such
borrowers at its own priority too, not only lower ones.

Each pass first settles requests whose preemptor no longer waits
(:func:`settle`): a victim kept for a cancelled or otherwise placed preemptor
is requeued, and a stop not yet acted on is withdrawn.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session, aliased

from gpufleet.config import SchedulerSettings, StoreSettings, WorkerSettings
from gpufleet.db.models import Host, Training, TrainingEvent
from gpufleet.db.session import rows_changed, session_scope, write_session
from gpufleet.db.types import utcnow
from gpufleet.lifecycle.transitions import record_event, transition
from gpufleet.scheduling import bookings, fairshare, quotas
from gpufleet.scheduling.reservation import GPUState
from gpufleet.workkinds import noun

log = logging.getLogger(__name__)

_STEP = re.compile(r"step-(\d+)/?$")

# An override of the fair-share order of victims: given the candidate victims,
# how far each one's owner is over their share (larger is further over; 0 when
# at or under it). None: the fair-share accounting (fairshare.over_share).
ShareExcess = Callable[[Session, Sequence[Training]], dict[uuid.UUID, float]]
share_excess: ShareExcess | None = None


def set_share_excess(fn: ShareExcess | None) -> None:
    """Plug the fair-share accounting into the victim order (None removes it)."""
    global share_excess
    share_excess = fn


def short(t: Training | uuid.UUID) -> str:
    tid = t.id if isinstance(t, Training) else t
    name = f"{t.name} " if isinstance(t, Training) else ""
    return f"{name}({str(tid)[:8]})"


def checkpoint_step(t: Training) -> int | None:
    m = _STEP.search(t.last_checkpoint or "")
    return int(m.group(1)) if m else None


# -- what a pass reads once ----------------------------------------------------


@dataclass
class Hints:
    """Read once per pass, without locks: which queued trainings preemption may help."""

    preemptors: set[uuid.UUID] = field(default_factory=set)
    lowest_victim_priority: int | None = None
    # The lowest priority of a running training on borrowed GPUs (its owner over quota).
    lowest_borrower_priority: int | None = None

    def worth_a_try(self, t: Training) -> bool:
        if t.id in self.preemptors:
            return True
        if not t.exclusive:
            return False
        return bool((self.lowest_victim_priority is not None and t.priority > self.lowest_victim_priority)
                    or (self.lowest_borrower_priority is not None and t.priority >= self.lowest_borrower_priority))


def hints(sess: Session, counting: quotas.Counting) -> Hints:
    h = Hints()
    h.preemptors = {p for p in sess.execute(
        select(Training.preempted_by).where(Training.preempted_by.is_not(None),
                                            Training.status.in_(("running", "preempted")))).scalars()
                    if p is not None}
    victims = list(sess.execute(
        select(Training.owner, func.min(Training.priority)).where(
            Training.status == "running", Training.preemptible.is_(True), Training.exclusive.is_(True),
            Training.preempted_by.is_(None), Training.cancel_requested.is_(False))
        .group_by(Training.owner)))
    if victims:
        h.lowest_victim_priority = min(p for _, p in victims)
        borrowed = [p for owner, p in victims if quotas.borrowing(sess, owner, counting)]
        h.lowest_borrower_priority = min(borrowed) if borrowed else None
    return h


def borrowers(sess: Session, t: Training, owners: Sequence[str], counting: quotas.Counting) -> set[str]:
    """Owners among ``owners`` whose trainings run on borrowed GPUs that ``t`` may take back.

    Only a training within its own quota takes GPUs back; a borrower never
    preempts another borrower.
    """
    if quotas.over_quota(sess, t, counting) is not None:
        return set()
    return {o for o in set(owners) if o != t.owner and quotas.borrowing(sess, o, counting)}


# -- giving reserved GPUs to the preemptor ---------------------------------------


def take_over(sess: Session, t: Training, host: Host,
              states: list[GPUState]) -> tuple[list[GPUState], str, dict] | None:
    """The GPUs ``t``'s preempted victims keep for it on ``host`` (plus free ones), or None.

    The caller has locked the host's GPUs and reserves the returned ones in
    this transaction; the victims are requeued here, which ends their hold.
    """
    victims = {v.id: v for v in sess.execute(
        select(Training).where(Training.status == "preempted", Training.preempted_by == t.id,
                               Training.host_id == host.id)
        .execution_options(populate_existing=True)).scalars()}
    if not victims:
        return None
    kept = [st for st in states if st.usable and st.exclusive_holders and not st.shared_holders
            and set(st.exclusive_holders) <= set(victims)]
    free = [st for st in states if st.why_not_exclusive() is None]
    count = t.requested_count or t.world_size or 1
    if t.gpu_ids and not t.auto_select:
        by_index = {st.index: st for st in kept + free}
        if not set(t.gpu_ids) <= set(by_index):
            return None
        chosen = [by_index[i] for i in t.gpu_ids]
    else:
        pool = [st for st in kept + free if fits(t, st)]
        if len(pool) < count:
            return None
        chosen = pool[:count]
    for v in victims.values():
        requeue_victim(sess, v, f"training {short(t)} took its GPUs")
    names = ", ".join(short(v) for v in victims.values())
    indexes = [st.index for st in chosen]
    record_event(sess, t.id, "preempt", status="queued",
                 reason=f"takes GPUs {indexes} on host {host.name} that preempted training(s) {names} freed",
                 data={"victims": [str(v) for v in victims], "gpu_ids": indexes})
    return chosen, "", {"chosen": indexes, "reason": f"GPUs freed by preempting {names}", "by": "preemption"}


def requeue_victim(sess: Session, v: Training, why: str) -> bool:
    step = checkpoint_step(v)
    where = f"from its checkpoint at step {step}" if step is not None else "from the start"
    values: dict = {"lease_owner": None, "lease_expires_at": None, "launcher_pid": None}
    if v.auto_select:
        values.update(gpu_ids=None, host_id=None)
    return transition(
        sess, v.id, ["preempted"], "queued", kind="retry",
        reason=f"{why}; requeued to resume {where} (preempted, not counted as a restart)",
        data={"retry_kind": "preempted", "preempted_by": str(v.preempted_by) if v.preempted_by else None,
              "checkpoint_step": step},
        **values)


# -- choosing victims ----------------------------------------------------------


def fits(t: Training, st: GPUState) -> bool:
    total = st.gpu.memory_total
    return not (t.memory_estimate and total and t.memory_estimate > total)


def _work_since_checkpoint(sess: Session, ids: list[uuid.UUID]) -> dict[uuid.UUID, datetime]:
    """When each training last saved its work: its newest checkpoint, or the start of its attempt."""
    rows = sess.execute(
        select(TrainingEvent.training_id, func.max(TrainingEvent.time))
        .where(TrainingEvent.training_id.in_(ids),
               or_(TrainingEvent.kind == "checkpoint",
                   (TrainingEvent.kind == "status") & (TrainingEvent.status == "running")))
        .group_by(TrainingEvent.training_id))
    return dict(rows.all())


def victim_order(sess: Session, candidates: Sequence[Training], scheduler_settings: SchedulerSettings | None = None,
                 store_settings: StoreSettings | None = None) -> list[Training]:
    """Lowest priority, then furthest over share, then least work lost."""
    if not candidates:
        return []
    now = utcnow()
    saved = _work_since_checkpoint(sess, [c.id for c in candidates])
    if share_excess is not None:
        excess = share_excess(sess, candidates)
    elif scheduler_settings is not None and store_settings is not None:
        over = fairshare.over_share(sess, scheduler_settings, store_settings, {c.owner for c in candidates})
        excess = {c.id: over.get(c.owner, 0.0) for c in candidates}
    else:
        excess = {}
    return sorted(candidates, key=lambda c: (
        c.priority, -excess.get(c.id, 0.0), (now - saved.get(c.id, now)).total_seconds(), c.created_at))


@dataclass
class _Choice:
    host: Host
    victims: list[Training]
    gpus: set[int]


def _pick_on_host(t: Training, host: Host, states: list[GPUState], eligible: list[Training],
                  pending: set[uuid.UUID], count: int) -> tuple[_Choice | None, bool]:
    """Victims on one host that free enough GPUs for ``t``; and whether pending ones suffice."""
    usable = {st.index: st for st in states if st.usable and fits(t, st)}
    freed_by: dict[uuid.UUID, set[int]] = {}
    for st in usable.values():
        if len(st.exclusive_holders) == 1 and not st.shared_holders:
            freed_by.setdefault(st.exclusive_holders[0], set()).add(st.index)
    free = {i for i, st in usable.items() if st.idle}
    coming = set().union(*(freed_by.get(v, set()) for v in pending))
    if t.gpu_ids and not t.auto_select:
        need = set(t.gpu_ids)
        if not need <= set(usable):
            return None, False
        if need <= free | coming:
            return None, bool(need & coming)
        blockers = {st.exclusive_holders[0] for i, st in usable.items() if i in need - free - coming
                    and len(st.exclusive_holders) == 1 and not st.shared_holders}
        by_id = {v.id: v for v in eligible}
        if not blockers <= set(by_id) or (need - free - coming) - set().union(*(freed_by[b] for b in blockers)):
            return None, False
        chosen = [by_id[b] for b in blockers]
        return _Choice(host, chosen, set().union(*(freed_by[b] for b in blockers))), False
    have = free | coming
    if len(have) >= count:
        return None, bool(coming)
    chosen = []
    for v in eligible:
        gain = freed_by.get(v.id, set()) - have
        if not gain:
            continue
        chosen.append(v)
        have |= gain
        if len(have) >= count:
            break
    if len(have) < count:
        return None, False
    # The greedy pass may have taken one that a later, larger victim made unneeded.
    for v in reversed(list(chosen)):
        rest = free | coming | set().union(*(freed_by[c.id] for c in chosen if c is not v))
        if len(rest) >= count:
            chosen.remove(v)
    return _Choice(host, chosen, set().union(*(freed_by[c.id] for c in chosen))), False


def plan(sess: Session, worker_settings: WorkerSettings, scheduler_settings: SchedulerSettings,
         store_settings: StoreSettings, t: Training, locked: list[tuple[Host, list[GPUState]]]) -> str | None:
    """Ask preemptible lower-priority trainings to make room for ``t``; returns its wait reason, or None.

    Called by the scheduler with the GPUs of ``locked`` hosts locked, after
    ``t`` could not be placed on any of them.
    """
    if not t.exclusive or not locked:
        return None
    count = t.requested_count or t.world_size or 1
    host_ids = [h.id for h, _ in locked]
    pending_rows = list(sess.execute(
        select(Training).where(Training.preempted_by == t.id, Training.status.in_(("running", "preempted")))
    ).scalars())
    pending = {v.id for v in pending_rows}
    running = (Training.status == "running", Training.host_id.in_(host_ids), Training.exclusive.is_(True),
               Training.preemptible.is_(True), Training.preempted_by.is_(None),
               Training.cancel_requested.is_(False))
    peers = sess.execute(select(Training.owner).where(*running, Training.priority == t.priority)).scalars().all()
    taking_back = borrowers(sess, t, peers, scheduler_settings.booking_quota_counts) if peers else set()
    may_stop = Training.priority < t.priority
    if taking_back:
        may_stop = or_(may_stop, and_(Training.priority == t.priority, Training.owner.in_(taking_back)))
    candidates = list(sess.execute(
        select(Training).where(*running, may_stop).execution_options(populate_existing=True)).scalars())
    ordered = victim_order(sess, candidates, scheduler_settings, store_settings)
    best: _Choice | None = None
    for host, states in locked:
        mine = [v for v in ordered if v.host_id == host.id]
        choice, waiting = _pick_on_host(t, host, states, mine, pending, count)
        if waiting:
            names = ", ".join(short(v) for v in pending_rows)
            return f"waits for preempted training(s) {names} to checkpoint and free their GPUs"
        if choice is not None and (best is None or _cost(choice) < _cost(best)):
            best = choice
    if best is None:
        _give_back(sess, t, pending_rows)
        return None
    names = ", ".join(f"{short(v)} (priority {v.priority})" for v in best.victims)
    for v in best.victims:
        done = sess.execute(
            update(Training).where(Training.id == v.id, Training.status == "running",
                                   Training.preempted_by.is_(None), Training.cancel_requested.is_(False))
            .values(preempted_by=t.id).execution_options(synchronize_session=False))
        if rows_changed(done) != 1:
            continue
        borrowed = v.priority == t.priority
        # A member's interactive session preempts as a training does; the reason names which it was.
        what = noun(t.kind)
        because = (f"its GPUs were borrowed beyond {v.owner}'s quota and {what} {short(t)}, within its quota, "
                   f"needs {count} GPU(s)" if borrowed else
                   f"preempted by {what} {short(t)} (priority {t.priority}, needs {count} GPU(s))")
        record_event(sess, v.id, "preempt", status="running",
                     reason=f"{because}: checkpointing and stopping; it resumes later (not counted as a restart)",
                     data={"preempted_by": str(t.id), "priority": t.priority, "borrowed": borrowed})
    gpus = sorted(best.gpus)
    record_event(sess, t.id, "preempt", status="queued",
                 reason=f"preempting {names} on host {best.host.name} to free GPUs {gpus}",
                 data={"victims": [str(v.id) for v in best.victims], "host": best.host.name, "gpu_ids": gpus})
    log.info("training %s preempts %s on %s", t.id, [str(v.id) for v in best.victims], best.host.name)
    return (f"preempting {names} on host {best.host.name}; starts once they have checkpointed "
            f"(up to {worker_settings.stop_grace_s:.0f}s)")


def _cost(c: _Choice) -> tuple:
    return (len(c.victims), max(v.priority for v in c.victims), len(c.gpus))


def _give_back(sess: Session, t: Training, pending: list[Training]) -> None:
    """``t`` cannot use what was preempted for it (a GPU went away): let the victims run again."""
    for v in pending:
        if v.status == "preempted":
            requeue_victim(sess, v, f"training {short(t)} no longer needs its GPUs")


# -- settling requests whose preemptor moved on -------------------------------------


def settle(settings: StoreSettings) -> int:
    """Requeue victims kept for a preemptor that no longer waits; withdraw its pending requests."""
    p = aliased(Training)
    stmt = (select(Training).outerjoin(p, p.id == Training.preempted_by)
            .where(Training.preempted_by.is_not(None), Training.status.in_(("running", "preempted")),
                   or_(p.id.is_(None), p.status != "queued"))
            .execution_options(populate_existing=True))
    # Read first without the write lock (SQLite): most passes find nothing to settle.
    with session_scope(settings) as sess:
        if sess.execute(stmt.limit(1)).first() is None:
            return 0
    with write_session(settings) as sess:
        stale = list(sess.execute(stmt).scalars())
        # Stopped ahead of a booking (scheduling.bookings.stop_ahead): asked by no training.
        booked = bookings.live_holds(sess, [v.preempted_by for v in stale if v.preempted_by is not None])
        n = 0
        for v in stale:
            if v.preempted_by is None:  # the statement reads only trainings a preemptor holds
                continue
            if v.status == "running" and v.preempted_by in booked:
                continue  # still checkpointing ahead of the booking
            if v.status == "preempted":
                n += requeue_victim(sess, v, booked.get(v.preempted_by)
                                    or f"training {short(v.preempted_by)} no longer waits for its GPUs")
            else:
                # Not acted on yet (or acted on: then it ends preempted and is requeued next pass).
                sess.execute(update(Training).where(Training.id == v.id, Training.status == "running")
                             .values(preempted_by=None).execution_options(synchronize_session=False))
        return n
