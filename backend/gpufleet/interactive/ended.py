"""The one ``session_stopped`` event of each session that ended, however it ended.

Written by the scheduler loop's session watch once the row is final (a stop,
idle release, the time limit, the process failing, a cancel from the
queue), with why, who asked and the GPU-hours it held.
"""

from __future__ import annotations

import uuid

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gpufleet.config import StoreSettings
from gpufleet.db.interactive import TrainingSession
from gpufleet.db.models import GPUAllocation
from gpufleet.db.session import rows_changed, session_scope, write_session
from gpufleet.db.types import utcnow
from gpufleet.lifecycle.transitions import record_event
from gpufleet.lifecycle.models import FINAL_STATUSES, Training

WHY = {"user": "stopped by {by}", "idle": "stopped: it stayed idle",
       "time_limit": "stopped: its time limit was reached", "failed": "ended: its process failed ({detail})"}


def _reason(status: str, stop_reason: str | None) -> str:
    """A stop's own reason; else a process that failed, or one its owner ended (a cancel, a notebook shut down)."""
    return stop_reason or ("failed" if status == "failed" else "user")


def held_gpu_hours(sess: Session, tid: uuid.UUID) -> float:
    now = utcnow()
    rows = sess.execute(select(GPUAllocation.allocated_at, GPUAllocation.released_at)
                        .where(GPUAllocation.training_id == tid)).all()
    return round(sum(((end or now) - start).total_seconds() for start, end in rows) / 3600, 4)


def record_ends(settings: StoreSettings) -> int:
    """Record ``session_stopped`` for every ended session still without one; returns how many."""
    with session_scope(settings) as sess:
        ended = sess.execute(
            select(Training.id, Training.status, Training.status_reason, TrainingSession.stop_reason,
                   TrainingSession.stopped_by)
            .join(TrainingSession, TrainingSession.training_id == Training.id)
            .where(TrainingSession.ended_recorded.is_(False), Training.status.in_(FINAL_STATUSES))).all()
    for tid, status, detail, stop_reason, by in ended:
        why = _reason(status, stop_reason)
        with write_session(settings) as sess:
            done = sess.execute(update(TrainingSession)
                                .where(TrainingSession.training_id == tid, TrainingSession.ended_recorded.is_(False))
                                .values(ended_recorded=True).execution_options(synchronize_session=False))
            if not rows_changed(done):
                continue
            hours = held_gpu_hours(sess, tid)
            text = WHY[why].format(by=by or "its owner", detail=detail or status)
            record_event(sess, tid, "session_stopped", status=status, user=by,
                         reason=f"{text}; it held {hours:g} GPU-hours",
                         data={"reason": why, "by": by, "gpu_hours": hours})
    return len(ended)
