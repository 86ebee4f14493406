"""The training lifecycle on the database row.

``queued -> scheduled -> running -> succeeded | failed | cancelled | reclaimed``,
and ``running -> preempted -> queued`` (gpufleet.scheduling.preemption). Every
change is a compare-and-set ``UPDATE ... WHERE status IN (...)`` so that the
scheduler, the worker, the recovery loop and a cancel request can race without
one overwriting another, and every change writes a ``training_events`` row
whose ``seq`` is taken from ``trainings.event_seq`` in the same transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gpufleet.db.models import FINAL_STATUSES, GPUAllocation, Training, TrainingEvent
from gpufleet.db.session import rows_changed
from gpufleet.db.types import utcnow


def record_event(
    sess: Session,
    training_id: uuid.UUID,
    kind: str,
    *,
    status: str | None = None,
    reason: str | None = None,
    user: str | None = None,
    data: dict[str, Any] | None = None,
) -> int:
    """Append one event; returns its sequence number.

    The increment is a single UPDATE ... RETURNING, so two writers in parallel
    transactions serialise on the row lock and never reuse a number.
    """
    seq = sess.execute(
        update(Training)
        .where(Training.id == training_id)
        .values(event_seq=Training.event_seq + 1)
        .returning(Training.event_seq)
        .execution_options(synchronize_session=False)
    ).scalar_one()
    sess.add(
        TrainingEvent(
            training_id=training_id,
            seq=seq,
            time=utcnow(),
            kind=kind,
            status=status,
            reason=reason,
            user=user,
            data=data,
        )
    )
    sess.flush()
    return seq


def record_first_event(sess: Session, training: Training, kind: str, *, status: str | None = None,
                       reason: str | None = None, user: str | None = None) -> None:
    """The first event of a row this transaction inserts with ``event_seq=1``: written with the commit.

    No other transaction can see the row before the commit, so its counter
    needs no ``UPDATE ... RETURNING`` round trip (what :func:`record_event`
    costs every later event). The row must already be flushed.
    """
    if training.event_seq != 1:
        raise ValueError(f"training {training.id} was not inserted with event_seq=1")
    sess.add(TrainingEvent(training_id=training.id, seq=1, time=utcnow(), kind=kind, status=status,
                           reason=reason, user=user))


def transition(
    sess: Session,
    training_id: uuid.UUID,
    from_statuses: Iterable[str],
    to_status: str,
    *,
    reason: str | None = None,
    user: str | None = None,
    kind: str = "status",
    data: dict[str, Any] | None = None,
    extra_where: Iterable[Any] = (),
    **values: Any,
) -> bool:
    """Move a training to ``to_status`` if it is in one of ``from_statuses``.

    Returns False (and writes nothing) when another actor got there first.
    ``values`` are further columns to set in the same UPDATE.
    """
    now = utcnow()
    cols: dict[str, Any] = {"status": to_status, "status_reason": reason, "updated_at": now}
    if to_status in FINAL_STATUSES:
        cols.setdefault("finished_at", now)
        cols.update(lease_owner=None, lease_expires_at=None)
    if to_status in FINAL_STATUSES or to_status == "queued":
        # A stop request belongs to the attempt it was meant to stop.
        cols.update(preempted_by=None, reclaim_requested=False)
    if to_status == "queued":
        # Back in the queue no launcher runs it: the old attempt's pid would be
        # read as the next attempt's until that one's launcher starts.
        cols.update(idle_since=None, idle_warned_at=None, launcher_pid=None)
    cols.update(values)
    res = sess.execute(
        update(Training)
        .where(Training.id == training_id, Training.status.in_(list(from_statuses)), *extra_where)
        .values(**cols)
        .execution_options(synchronize_session=False)
    )
    if rows_changed(res) != 1:
        return False
    if to_status in FINAL_STATUSES or to_status == "queued":
        # The reservation ends in the same transaction as the status that ends it.
        release_allocations(sess, training_id, now)
    record_event(sess, training_id, kind, status=to_status, reason=reason, user=user, data=data)
    return True


def release_allocations(sess: Session, training_id: uuid.UUID, when: datetime | None = None) -> int:
    res = sess.execute(
        update(GPUAllocation)
        .where(GPUAllocation.training_id == training_id, GPUAllocation.released_at.is_(None))
        .values(released_at=when or utcnow())
        .execution_options(synchronize_session=False)
    )
    return rows_changed(res)


def get_training(sess: Session, training_id: uuid.UUID) -> Training | None:
    return sess.execute(
        select(Training).where(Training.id == training_id).execution_options(populate_existing=True)
    ).scalar_one_or_none()
