"""The job scheduler: queued trainings onto free GPUs, by priority, fair share, then age.

Each training is placed in its own reservation transaction
(:mod:`gpufleet.scheduling.reservation`); the Celery task is sent only after
that transaction has committed, to the queue of the host that owns the GPUs.
A training that cannot be placed stays queued with a ``wait_reason`` that
says why; nothing is dropped.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from gpufleet.config import SchedulerSettings, Settings, StoreSettings, TelemetrySettings, WorkerSettings
from gpufleet.db.models import GPU, GPUAllocation, Host, Training
from gpufleet.db.session import session_scope, write_session
from gpufleet.db.types import utcnow
from gpufleet.lifecycle import places
from gpufleet.scheduling import backfill, batch, bookings, fairshare, gang, preemption
from gpufleet.scheduling.choose import choose_for_scheduler, scheduler_wait_reason
from gpufleet.scheduling.quotas import Counting, PassMemo, quota_wait
from gpufleet.scheduling.reservation import GPUState, lock_host_gpus, reservation_session, reserve

log = logging.getLogger(__name__)

# Round-robin position per host for shared trainings; losing it on restart only
# changes where the next model starts, never correctness.
_RR_CURSOR: dict[uuid.UUID, int] = {}


@dataclass
class PassResult:
    scheduled: list[tuple[uuid.UUID, str]] = field(default_factory=list)
    waiting: dict[uuid.UUID, str] = field(default_factory=dict)


@dataclass
class _Snapshot:
    """What the pass believes is busy, read once without locks.

    Only used to skip trainings that cannot fit, so that a long queue costs
    one write transaction per training that might start rather than one per
    queued training. The decision itself is always re-made under the lock.
    """

    busy: dict[uuid.UUID, set[int]] = field(default_factory=dict)
    usable: dict[uuid.UUID, set[int]] = field(default_factory=dict)
    shared_full: set[uuid.UUID] = field(default_factory=set)
    preempt: preemption.Hints = field(default_factory=preemption.Hints)

    # The most free GPUs any one host has: a training anywhere that needs more waits. Kept, not
    # recomputed per queued training (a queue of 10,000 on 1,000 hosts made that 10 million set differences).
    _most_free: int | None = None

    def free(self, host_id: uuid.UUID) -> set[int]:
        return self.usable.get(host_id, set()) - self.busy.get(host_id, set())

    def most_free(self) -> int:
        if self._most_free is None:
            self._most_free = max((len(self.free(h)) for h in self.usable), default=0)
        return self._most_free

    def hold(self, host_id: uuid.UUID, gpus: Sequence[int]) -> None:
        self.busy.setdefault(host_id, set()).update(gpus)
        self._most_free = None


def _snapshot(sess: Session, counting: Counting) -> _Snapshot:
    snap = _Snapshot(preempt=preemption.hints(sess, counting))
    for host_id, index, ok in sess.execute(
        select(GPU.host_id, GPU.index, (GPU.enabled & ~GPU.drained & (GPU.status == "ok")))
    ):
        if ok:
            snap.usable.setdefault(host_id, set()).add(index)
    for host_id, index in sess.execute(
        select(GPUAllocation.host_id, GPUAllocation.gpu_index).where(GPUAllocation.released_at.is_(None))
    ):
        snap.busy.setdefault(host_id, set()).add(index)
    return snap


def _hopeless(snap: _Snapshot, t: Training) -> bool:
    if t.wait_reason is None or t.gang is not None:
        return False  # try once under the lock, so the row says why it waits
    if snap.preempt.worth_a_try(t):
        return False  # lower-priority trainings it may preempt hold GPUs, or hold them for it
    if not t.exclusive:
        return t.host_id in snap.shared_full if t.host_id else snap.usable.keys() <= snap.shared_full
    if t.gpu_ids and not t.auto_select and t.host_id is not None:
        return bool(set(t.gpu_ids) & snap.busy.get(t.host_id, set()))
    count = t.requested_count or t.world_size or 1
    return len(snap.free(t.host_id)) < count if t.host_id else snap.most_free() < count


# What a pass reads of each queued training: its order, what _hopeless, quotas, fair share and
# backfill look at. Plain rows, not ORM objects (a queue of 10,000 cost a second to build as
# objects); the training itself is re-read, locked, by the transaction that places it.
_QUEUE_COLUMNS = (
    Training.id, Training.name, Training.owner, Training.priority, Training.created_at, Training.status,
    Training.wait_reason, Training.gang, Training.exclusive, Training.host_id, Training.requested_host,
    Training.gpu_ids, Training.auto_select, Training.requested_count, Training.world_size,
    Training.memory_estimate, Training.max_runtime_s, Training.preemptible, Training.preempted_by,
    Training.estimate_key, Training.max_steps,  # what bookings judge work with no max_runtime_s by (walltime)
)


def queued(sess: Session, limit: int) -> list[Any]:
    """The first ``limit`` queued trainings in queue order (priority, then age), as rows of ``_QUEUE_COLUMNS``."""
    now = utcnow()
    stmt = select(*_QUEUE_COLUMNS).where(
        Training.status == "queued",
        places.team_placed(),  # a pool's own scheduler places the others (gpufleet.pools)
        or_(Training.not_before.is_(None), Training.not_before <= now),
    )
    stmt = stmt.order_by(Training.priority.desc(), Training.created_at, Training.id).limit(limit)
    return list(sess.execute(stmt).all())


def _queue_pages(settings: StoreSettings, page: int, max_rows: int) -> Iterator[list[Any]]:
    """The queue in order, in pages. Every pass sees the whole queue (up to
    ``max_rows``, rounded up to whole pages): reading only its head would let a
    few hundred trainings that cannot be placed now starve one behind them that
    could run at once. One statement reads it all: the queue index
    (``ix_trainings_queue``) hands the rows over in order, where a page at a
    time re-read the queue for every page."""
    pages = -(-max_rows // page) if max_rows > 0 else 0
    if not pages:
        return
    with session_scope(settings) as sess:
        rows = queued(sess, pages * page)
    for start in range(0, len(rows), page):
        yield rows[start:start + page]


def schedule_pending(
    settings: Settings,
    send: Callable[[uuid.UUID, str], None] | None = None,
    *,
    limit: int = 200,
    max_rows: int = 10_000,
    clock: Callable[[], datetime] = utcnow,
) -> PassResult:
    """One scheduling pass over the queue; ``send(training_id, host_name)`` after each commit.

    ``clock``: the pass's now (bookings and backfill read it), a test's own clock instead of the wall's."""
    result = PassResult()
    now = clock()
    _bookings_step(settings, settings, settings, now)
    preemption.settle(settings)
    with session_scope(settings) as sess:
        snap = _snapshot(sess, settings.booking_quota_counts)
    rows = fairshare.in_order(settings, settings, _queue_pages(settings, limit, max_rows))
    quota_memo = PassMemo()
    # Higher-priority trainings that wait keep the GPUs they will need from lower ones.
    bf = backfill.Pass(settings, lambda sess, t: candidate_hosts(sess, settings, t), now=now)
    for row in rows:
        if quota_memo.skip(row):
            continue  # waits for its owner's quota: it keeps no GPUs from anyone
        if _hopeless(snap, row):
            bf.waiting(row)
            continue
        tid = row.id
        try:
            with reservation_session(settings) as sess:
                placed, reason, host_id, gpus = _schedule_one(sess, settings, tid, bf, quota_memo, now)
        except IntegrityError:
            # The exclusive-holder index refused a double booking that raced
            # past the lock; the training simply waits for the next pass.
            log.warning("reservation for %s lost a race; will retry", tid)
            continue
        except OperationalError as exc:  # lock timeout, serialization, busy SQLite
            log.warning("reservation for %s failed: %s", tid, exc)
            continue
        if placed:
            if host_id is not None:  # a placed training names its host: the pass counts its GPUs as taken
                snap.hold(host_id, gpus)
            result.scheduled.append((tid, placed))
            if send is not None:
                try:
                    send(tid, placed)
                except Exception:  # the recovery loop re-sends stale scheduled rows
                    log.exception("could not send training %s to host %s", tid, placed)
        elif reason:
            if not quota_memo.waits(row.id):
                bf.waiting(row)
            result.waiting[tid] = reason
            if not row.exclusive:
                snap.shared_full.update([row.host_id] if row.host_id else list(snap.usable))
    return result


def _bookings_step(store: StoreSettings, scheduler: SchedulerSettings, worker: WorkerSettings, now: datetime) -> None:
    """Tell bookers whose bookings start soon, release unused bookings, then ask stoppable work on GPUs a
    booking soon takes to stop."""
    with write_session(store) as sess:
        for b in bookings.starting_soon(sess, now, scheduler.booking_notice_lead_s, scheduler.booking_release_grace_s):
            log.info("booking %s of %s starts at %s: its owner is told", b.id, b.owner, b.start_at)
        for b in bookings.release_unused(sess, now, scheduler.booking_release_grace_s):
            log.info("booking %s of %s released: %s", b.id, b.owner, b.release_reason)
        for t, b in bookings.stop_ahead(sess, now, worker.stop_grace_s):
            log.info("training %s asked to stop ahead of booking %s of %s", t.id, b.id, b.owner)


def _schedule_one(
    sess: Session, settings: Settings, tid: uuid.UUID, bf: backfill.Pass | None = None,
    quota_memo: PassMemo | None = None, now: datetime | None = None,
) -> tuple[str | None, str | None, uuid.UUID | None, list[int]]:
    stmt = select(Training).where(Training.id == tid, Training.status == "queued")
    if sess.get_bind().dialect.name == "postgresql":
        # Another scheduler working on this row: leave it to them.
        stmt = stmt.with_for_update(skip_locked=True)
    t = sess.execute(stmt.execution_options(populate_existing=True)).scalar_one_or_none()
    if t is None:
        return None, None, None, []
    if over := quota_wait(sess, t, settings.booking_quota_counts, quota_memo):
        _set_wait(sess, t, over)
        return None, over, None, []
    if t.gang is not None:  # across hosts: gpufleet.scheduling.gang (no preemption or backfill for gangs yet)
        return gang.schedule_gang(sess, settings, t, now, settings.stop_grace_s)
    hosts = candidate_hosts(sess, settings, t)
    if not hosts:
        reason = (
            f"host {t.requested_host} is not known to the fleet" if t.requested_host
            else "no GPU host is online"
        )
        _set_wait(sess, t, reason)
        return None, reason, None, []
    reasons: list[str] = []
    locked: list[tuple[Host, list[GPUState]]] = []
    for host in hosts:
        states = lock_host_gpus(sess, host.id)
        # GPUs booked by another (or for maintenance) over the time this training would run are not its.
        bookings.mark(states, bookings.booked_away(sess, t, host.id, now or utcnow(), settings.stop_grace_s))
        # GPUs that trainings preempted for this one keep for it come first: they are its already.
        taken = preemption.take_over(sess, t, host, states)
        chosen, why, selection = taken or _choose(settings, t, host, states)
        if chosen and not taken and bf is not None and (held := bf.blocks(sess, t, host, [c.index for c in chosen])):
            chosen, why = [], held
        if chosen:
            if reserve(sess, t, host, chosen, selection=selection):
                return host.name, None, host.id, [c.index for c in chosen]
            return None, None, None, []
        locked.append((host, states))
        reasons.append(why if len(hosts) == 1 else f"{host.name}: {why}")
    reason = preemption.plan(sess, settings, settings, settings, t, locked) or "; ".join(reasons)
    _set_wait(sess, t, reason)
    return None, reason, None, []


def candidate_hosts(sess: Session, settings: TelemetrySettings, t: Any) -> list[Any]:
    """The hosts ``t`` may be placed on: its own, the one it names, or every online one.

    Rows with the host's ``id`` and ``name`` (all that placing needs), not ORM objects: every
    attempt to place a training reads them, and a fleet has a thousand hosts.
    """
    cols = select(Host.id, Host.name, Host.status, Host.last_heartbeat, Host.worker_lost_at)
    if t.host_id is not None:
        stmt = cols.where(Host.id == t.host_id)
    elif t.requested_host:
        stmt = cols.where(Host.name == t.requested_host)
    else:
        stmt = cols.where(Host.status == "online").order_by(Host.name)
        # The server chooses: never a host whose heartbeat stopped, nor one whose worker was
        # just lost (its agent may still beat; nobody would run the training there).
        from gpufleet.scheduling.inputs import host_offline

        hosts = sess.execute(stmt).all()
        return [h for h in hosts if not host_offline(h.status, h.last_heartbeat, settings) and h.worker_lost_at is None]
    return list(sess.execute(stmt).all())


def _choose(
    settings: Settings, t: Training, host: Host, states: list[GPUState]
) -> tuple[list[GPUState], str, dict | None]:
    by_index = {s.index: s for s in states}
    max_models = settings.gpu.max_models_per_gpu
    if t.gpu_ids and not t.auto_select:
        missing = [i for i in t.gpu_ids if i not in by_index]
        if missing:
            return [], f"GPU {missing[0]} does not exist on host {host.name}", None
        chosen = [by_index[i] for i in t.gpu_ids]
        for st in chosen:
            why = st.why_not_exclusive() if t.exclusive else st.why_not_shared(t.memory_estimate, max_models)
            if why:
                return [], why, None
        return chosen, "", None
    count = t.requested_count or t.world_size or 1
    if not t.exclusive:
        slots = [
            batch.Slot(s.index, s.gpu.memory_total, len(s.shared_holders), s.shared_reserved,
                       list(s.shared_recipes))
            for s in states if s.usable and not s.exclusive_holders
        ]
        strategy = (t.selection or {}).get("strategy", "load_balance")
        slot = batch.pick(slots, t.recipe, t.memory_estimate, strategy, max_models,
                          _RR_CURSOR.get(host.id, 0))
        if slot is None:
            return [], f"every GPU on host {host.name} is full (max {max_models} models per GPU, or memory)", None
        _RR_CURSOR[host.id] = [s.index for s in slots].index(slot.index) + 1
        sel = dict(t.selection or {}, chosen=[slot.index], reason=f"{strategy} placement")
        return [by_index[slot.index]], "", sel
    free = [s for s in states if s.why_not_exclusive() is None]
    if len(free) < count:
        busy = [s.why_not_exclusive() for s in states if s.why_not_exclusive()]
        detail = f" ({busy[0]})" if busy else ""
        return [], f"needs {count} free GPU(s) on host {host.name}, {len(free)} free{detail}", None
    return _auto_select(settings, t, host, free, count)


def _auto_select(
    settings: Settings, t: Training, host: Host, free: Sequence[GPUState], count: int
) -> tuple[list[GPUState], str, dict | None]:
    """The server's choice among the GPUs no reservation holds.

    The GPU selection logic (:mod:`gpufleet.scheduling.choose`) adds what
    the reservations cannot see: foreign processes, live free memory, NVLink.
    When it finds no usable set the training waits with its reason. Only when
    that logic breaks does the scheduler take the first free GPUs.
    """
    try:
        indexes = [s.index for s in free]
        out = choose_for_scheduler(indexes, count, t.memory_estimate, host_name=host.name, settings=settings)
        if out is None:
            why = scheduler_wait_reason(indexes, count, t.memory_estimate, host_name=host.name, settings=settings)
            return [], why, None
        chosen_idx, why = out
        by_index = {s.index: s for s in free}
        if len(chosen_idx) == count and all(i in by_index for i in chosen_idx):
            return [by_index[i] for i in chosen_idx], "", {"chosen": list(chosen_idx), "reason": why, "by": "recommend"}
        log.error("GPU recommendation %s is not %d of the free GPUs %s; using the first free",
                  chosen_idx, count, indexes)
    except Exception:  # a selection bug must not stop the queue
        log.exception("GPU recommendation failed for %s; using the first free GPUs", t.id)
    chosen = list(free[:count])
    return chosen, "", {"chosen": [s.index for s in chosen], "reason": "first free GPUs", "by": "scheduler"}


def _set_wait(sess: Session, t: Training, reason: str) -> None:
    if t.wait_reason != reason:
        sess.execute(
            update(Training).where(Training.id == t.id).values(wait_reason=reason)
            .execution_options(synchronize_session=False)
        )
