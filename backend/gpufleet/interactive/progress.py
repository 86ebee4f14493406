"""A session launcher's progress lines, written to the session's rows by the worker's metrics sink.

The launcher runs as the owner's account in the sandbox and cannot reach
the database; it writes ``session_ready`` and ``session_activity`` lines to
its progress file like a training's launcher writes steps, and the sink
hands them here in its transaction.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import or_, update
from sqlalchemy.orm import Session

from gpufleet.db.interactive import TrainingSession
from gpufleet.db.session import rows_changed
from gpufleet.db.types import utcnow
from gpufleet.interactive.view import base_url
from gpufleet.lifecycle.transitions import record_event

LINES = ("session_ready", "session_activity")


def _when(value: Any) -> datetime | None:
    try:
        at = datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None
    return at.replace(tzinfo=timezone.utc) if at is not None and at.tzinfo is None else at


def apply(sess: Session, tid: uuid.UUID, lines: list[dict[str, Any]], host: str) -> None:
    """Record readiness (once, with the ``session_ready`` event) and the newest notebook activity."""
    for line in lines:
        if line.get("type") == "session_ready":
            done = sess.execute(update(TrainingSession)
                                .where(TrainingSession.training_id == tid, TrainingSession.ready_at.is_(None))
                                .values(ready_at=utcnow(), active_at=utcnow())
                                .execution_options(synchronize_session=False))
            if rows_changed(done):
                jupyter = bool(line.get("jupyter"))
                record_event(sess, tid, "session_ready", status="running",
                             reason=("notebook ready at " + base_url(tid)) if jupyter
                             else f"shell session ready on host {host}",
                             data={"mode": "jupyter" if jupyter else "shell", "host": host,
                                   "gpu_ids": line.get("gpu_ids"), "url": base_url(tid) if jupyter else None})
        elif line.get("type") == "session_activity" and (at := _when(line.get("active_at"))) is not None:
            sess.execute(update(TrainingSession)
                         .where(TrainingSession.training_id == tid,
                                or_(TrainingSession.active_at.is_(None), TrainingSession.active_at < at))
                         .values(active_at=at).execution_options(synchronize_session=False))
