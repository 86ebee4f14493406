"""How long work of a shape has run before: what bookings judge work with no ``max_runtime_s`` by.

A booking of another's lets work take its GPUs before it starts only when the work is known to end first
(``scheduling.bookings``). Its own ``max_runtime_s`` says so best (the supervisor enforces it); without one,
the runs of the same shape that succeeded before say how long it needs: the same ``estimate_key`` (recipe,
model shape, batch layout, precision, strategy, world size; a script's code), at the slowest rate per step
those runs had, times the steps this one asks for — or, for work without steps, the longest such run — and
``FACTOR`` on top. The latest ``RUNS`` runs count. Nothing enforces it: work that overruns its history is
still running when the booking starts (docs/bookings.md says what happens then). Backfill behind a
higher-priority training does not read it: it promises that training never to delay it, which only an
enforced limit can keep.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.db.models import Training

RUNS = 10
FACTOR = 1.25


def needed_s(sess: Session, t: Any) -> float | None:
    """Seconds ``t`` is expected to need by its shape's earlier runs (with the factor); None without any."""
    if not t.estimate_key:
        return None
    rows = sess.execute(
        select(Training.started_at, Training.finished_at, Training.max_steps)
        .where(Training.estimate_key == t.estimate_key, Training.status == "succeeded", Training.id != t.id,
               Training.started_at.is_not(None), Training.finished_at.is_not(None))
        .order_by(Training.finished_at.desc()).limit(RUNS)).all()
    spans = [((end - begun).total_seconds(), steps) for begun, end, steps in rows
             if begun is not None and end is not None and end > begun]
    if t.max_steps:
        rates = [secs / steps for secs, steps in spans if steps]
        return max(rates) * t.max_steps * FACTOR if rates else None
    runs = [secs for secs, steps in spans if not steps]
    return max(runs) * FACTOR if runs else None
