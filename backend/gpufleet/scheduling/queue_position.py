"""Where each queued training stands in the queue, in the order the scheduler serves it."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.config import Settings
from gpufleet.db.models import Training
from gpufleet.scheduling import fairshare


def queue_positions(sess: Session, settings: Settings, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, int]:
    """1-based positions of the queued trainings among ``ids``; others are left out.

    The scheduler's order: priority, then (with fair share on and several
    owners waiting) each owner's fair-share factor, then age. Trainings held
    back by ``not_before`` count too, since they rejoin the queue.
    """
    wanted = set(ids)
    if not wanted:
        return {}
    rows = list(sess.execute(
        select(Training).where(Training.status == "queued")
        .order_by(Training.priority.desc(), Training.created_at, Training.id)
    ).scalars())
    owners = {t.owner for t in rows}
    if settings.fair_share and len(owners) > 1:
        rows = fairshare.order(rows, fairshare.owner_factors(sess, settings, owners))
    return {t.id: n for n, t in enumerate(rows, start=1) if t.id in wanted}
