"""How the trainings routes answer: a domain error as an HTTP error, a training read or a 404, views as
``TrainingPublic``. Shared by the routes of the trainings resource (``routes/trainings.py``,
``routes/training_files.py``), so neither reaches into the other's helpers."""

from __future__ import annotations

import uuid

from fastapi import HTTPException
from sqlalchemy.orm import Session

from gpufleet.api.auth import AuthUser
from gpufleet.api.readers import may_read_training
from gpufleet.config import Settings
from gpufleet.lifecycle.models import Training
from gpufleet.trainings import service
from gpufleet.wire.trainings import TrainingGPU, TrainingHostPublic, TrainingPublic


def http_error(exc: service.TrainingRequestError) -> HTTPException:
    if exc.problems:
        # Every wrong field at once, shaped like FastAPI's own validation errors.
        return HTTPException(exc.status, [
            {"loc": ["body", *(int(p) if p.isdigit() else p for p in field.split("."))],
             "msg": msg, "type": "value_error"}
            for field, msg in exc.problems
        ])
    return HTTPException(exc.status, str(exc))


def load(session: Session, training_id: uuid.UUID) -> Training:
    try:
        return service.get(session, training_id)
    except service.TrainingRequestError as exc:
        raise http_error(exc) from None


def publics(views: list[service.TrainingView]) -> list[TrainingPublic]:
    """The public form of each view (its queue place, when the view was read with it)."""
    out = []
    for v in views:
        pub = TrainingPublic.model_validate(v.training)
        pub.queue_position, pub.expected_start = v.queue_position, v.expected_start
        pub.host_name = v.host_name
        pub.gpus = [TrainingGPU(index=a.gpu_index, exclusive=a.exclusive, allocated_at=a.allocated_at,
                                released_at=a.released_at) for a in v.gpus]
        pub.hosts = [TrainingHostPublic(**h) for h in v.hosts] if v.hosts else None
        out.append(pub)
    return out


def readable(settings: Settings, user: AuthUser, pubs: list[TrainingPublic]) -> list[TrainingPublic]:
    """Others' configs left out where only owners and admins may read them."""
    for pub in pubs:
        if not may_read_training(settings, user, pub.owner):
            pub.config = {}
    return pubs
