"""Where queued trainings stand: their place in the fleet's queue, and when the first may start.

Read for the API's answers (``queue_position``, ``expected_start``) by
:func:`gpufleet.trainings.service.views`; the scheduler's own order
(:mod:`gpufleet.scheduling.queue_position`) decides both.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy.orm import Session

from gpufleet.config import Settings
from gpufleet.scheduling.queue_position import expected_start, queue_positions


def standing(sess: Session, settings: Settings,
             queued: Iterable[uuid.UUID]) -> dict[uuid.UUID, tuple[int, datetime | None]]:
    """Each queued training's place (1 is next) and, for the next one, when it is expected to start."""
    positions = queue_positions(sess, settings, settings, list(queued))
    return {tid: (pos, expected_start(sess, settings, settings, tid) if pos == 1 else None)
            for tid, pos in positions.items()}
