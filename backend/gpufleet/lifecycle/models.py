"""The tables of the trainings domain, as the rest of the domain names them.

The classes live in :mod:`gpufleet.db.models` (one metadata, one Alembic
history); this module is the trainings domain's view of them.
"""

from __future__ import annotations

import uuid
from typing import Any

from gpufleet.db.models import (
    ACTIVE_STATUSES,
    FINAL_STATUSES,
    TRAINING_STATUSES,
    CodeBlob,
    GangMember,
    GPUAllocation,
    Training,
    TrainingEvent,
    TrainingMetric,
)

__all__ = [
    "ACTIVE_STATUSES",
    "FINAL_STATUSES",
    "TRAINING_STATUSES",
    "CodeBlob",
    "GangMember",
    "GPUAllocation",
    "Training",
    "TrainingEvent",
    "TrainingMetric",
    "new_training",
]


def new_training(*, kind: str, recipe: str, owner: str, name: str, world_size: int, priority: int,
                 preemptible: bool, **fields: Any) -> Training:
    """A new row for any kind of work, ``queued`` with nothing run yet; ``fields`` are what its request set.

    The one place a training row starts (a recipe training, a script, a session): the counters,
    the cancel flag and the first event's number are the same for every kind.
    """
    values: dict[str, Any] = dict(
        id=uuid.uuid4(), status="queued", gpu_ids=None, host_id=None, requested_host=None, auto_select=True,
        requested_count=world_size, distributed=world_size > 1, exclusive=True, config={}, max_restarts=0,
        allow_rebalance=False, restarts=0, attempt=0, step=0,
        event_seq=1,  # its queued event, written with it (lifecycle.transitions.record_first_event)
        cancel_requested=False,
    )
    values.update(fields)
    return Training(kind=kind, recipe=recipe, owner=owner, name=name.strip(), world_size=world_size,
                    priority=priority, preemptible=preemptible, **values)
