"""Where each queued training stands in the queue, in the order the scheduler serves it."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.db.models import Training


def queue_positions(sess: Session, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, int]:
    """1-based positions of the queued trainings among ``ids``, by priority, then age.

    The same order :func:`gpufleet.scheduling.scheduler.queued` reads the queue
    in; trainings held back by ``not_before`` count too, since they rejoin it.
    Trainings not queued are left out.
    """
    wanted = set(ids)
    if not wanted:
        return {}
    order = sess.execute(
        select(Training.id).where(Training.status == "queued")
        .order_by(Training.priority.desc(), Training.created_at, Training.id)
    ).scalars()
    return {tid: n for n, tid in enumerate(order, start=1) if tid in wanted}
