"""Where each queued training stands in the queue, in the order the scheduler serves it."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.config import SchedulerSettings, StoreSettings, TelemetrySettings, WorkerSettings
from gpufleet.db.models import Training
from gpufleet.db.types import utcnow
from gpufleet.lifecycle import places
from gpufleet.scheduling import backfill, fairshare
from gpufleet.scheduling.scheduler import candidate_hosts


def queue_positions(sess: Session, scheduler_settings: SchedulerSettings, store_settings: StoreSettings,
                    ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, int]:
    """1-based positions of the queued trainings among ``ids``; others are left out.

    The scheduler's order: priority, then (with fair share on and several
    owners waiting) each owner's fair-share factor, then age. Trainings held
    back by ``not_before`` count too, since they rejoin the queue.
    """
    wanted = set(ids)
    if not wanted:
        return {}
    rows = list(sess.execute(
        select(Training).where(Training.status == "queued", places.team_placed())
        .order_by(Training.priority.desc(), Training.created_at, Training.id)
    ).scalars())
    owners = {t.owner for t in rows}
    if scheduler_settings.fair_share and len(owners) > 1:
        rows = fairshare.order(rows, fairshare.owner_factors(sess, scheduler_settings, store_settings, owners))
    return {t.id: n for n, t in enumerate(rows, start=1) if t.id in wanted}


def expected_start(sess: Session, worker_settings: WorkerSettings, telemetry_settings: TelemetrySettings,
                   training_id: uuid.UUID) -> datetime | None:
    """When the training served next can start: when the GPUs backfill keeps for it free up.

    Only the head of the queue has such a time: it is what backfill reserves for it,
    from the ``max_runtime_s`` or measured progress of the trainings holding those
    GPUs. None when a holder's end cannot be foreseen, or the training needs no
    reservation (it is about to be placed, or it shares GPUs).
    """
    t = sess.get(Training, training_id)
    if t is None or t.status != "queued":
        return None
    r = backfill.reservation(sess, worker_settings, t, candidate_hosts(sess, telemetry_settings, t), utcnow())
    return r.free_at if r is not None else None
