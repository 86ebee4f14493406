"""The tables of the trainings domain, as the rest of the domain names them.

The classes live in :mod:`gpufleet.db.models` (one metadata, one Alembic
history); this module is the trainings domain's view of them.
"""

from __future__ import annotations

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
]
