"""Trainings resource: create (one or a batch), read, events, metrics, logs, cancel."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.api.auth import AuthUser, ensure_may_read_training, may_read_training
from gpufleet.api.deps import (
    CreatorUser,
    MemberUser,
    PageDep,
    SessionDep,
    SettingsDep,
    ViewerUser,
    ensure_can_cancel,
    ensure_can_run_code,
)
from gpufleet.api.hosts import UNKNOWN_HOST
from gpufleet.api.params import SeqQuery, StepQuery
from gpufleet.api.schemas.bounds import MAX_OFFSET
from gpufleet.api.schemas.trainings import (
    TrainingBatchCreate,
    TrainingBatchPublic,
    TrainingCreate,
    TrainingEventPublic,
    TrainingEventsPublic,
    TrainingGPU,
    TrainingLogPublic,
    TrainingMetricPublic,
    TrainingMetricsPublic,
    TrainingPublic,
    TrainingsPublic,
)
from gpufleet.api.security.openapi import error_response
from gpufleet.config import Settings
from gpufleet.db.models import (
    TRAINING_STATUSES,
    GPUAllocation,
    Host,
    Training,
    TrainingEvent,
    TrainingMetric,
)
from gpufleet.db.session import write_in
from gpufleet.jobs import service
from gpufleet.jobs.logs import log_path, read_log

router = APIRouter(prefix="/api/v1/trainings", tags=["trainings"])


def _http(exc: service.TrainingRequestError) -> HTTPException:
    if exc.problems:
        # Every wrong field at once, shaped like FastAPI's own validation errors.
        return HTTPException(exc.status, [
            {"loc": ["body", *(int(p) if p.isdigit() else p for p in field.split("."))],
             "msg": msg, "type": "value_error"}
            for field, msg in exc.problems
        ])
    return HTTPException(exc.status, str(exc))


def _load(sess: Session, training_id: uuid.UUID) -> Training:
    t = sess.get(Training, training_id, populate_existing=True)
    if t is None:
        raise HTTPException(404, f"training {training_id} does not exist")
    return t


def _publics(sess: Session, rows: list[Training]) -> list[TrainingPublic]:
    """Rows with their host and current GPUs, in two queries for the whole page."""
    if not rows:
        return []
    hosts = dict(sess.execute(select(Host.id, Host.name).where(
        Host.id.in_({t.host_id for t in rows if t.host_id is not None}))).all())
    allocs: dict[uuid.UUID, list[GPUAllocation]] = {t.id: [] for t in rows}
    for a in sess.execute(
        select(GPUAllocation).where(GPUAllocation.training_id.in_(list(allocs)))
        .order_by(GPUAllocation.allocated_at.desc(), GPUAllocation.gpu_index)
    ).scalars():
        allocs[a.training_id].append(a)
    out = []
    for t in rows:
        pub = TrainingPublic.model_validate(t)
        pub.host_name = hosts.get(t.host_id) if t.host_id is not None else None
        mine = allocs[t.id]
        if mine:
            # The newest reservation: the active one, or the last one once it ended.
            newest = mine[0].allocated_at
            current = [a for a in mine if a.released_at is None] or [
                a for a in mine if abs((a.allocated_at - newest).total_seconds()) < 1.0
            ]
            pub.gpus = sorted(
                (TrainingGPU(index=a.gpu_index, exclusive=a.exclusive, allocated_at=a.allocated_at,
                             released_at=a.released_at) for a in current),
                key=lambda g: g.index,
            )
        out.append(pub)
    return out


def _public(sess: Session, t: Training) -> TrainingPublic:
    return _publics(sess, [t])[0]


def _wake() -> None:
    from gpufleet.jobs.scheduler_loop import wake

    wake()


@router.post("", response_model=TrainingPublic, status_code=201, operation_id="trainings-create",
             responses=UNKNOWN_HOST)
def create_training(
    body: TrainingCreate, session: SessionDep, settings: SettingsDep, user: CreatorUser
) -> TrainingPublic:
    if body.kind == "script":
        ensure_can_run_code(session, user)
    elif body.recipe is None:
        raise HTTPException(422, "recipe: a training of kind 'recipe' needs the recipe's name")
    try:
        req = service.TrainingRequest(**{**body.model_dump(), "recipe": body.recipe or "script"})
        # The request's own session (the auth and rate-limit checks read
        # through it): a burst never holds one connection while waiting for another.
        with write_in(session, settings) as sess:
            [row] = service.create_trainings(sess, settings, [req], user.name)
            out = _public(sess, row)
    except service.TrainingRequestError as exc:
        raise _http(exc) from None
    _wake()
    return out


@router.post("/batch", response_model=TrainingBatchPublic, status_code=201, operation_id="trainings-create-batch",
             responses=UNKNOWN_HOST)
def create_batch(
    body: TrainingBatchCreate, session: SessionDep, settings: SettingsDep, user: CreatorUser
) -> TrainingBatchPublic:
    """Many small trainings sharing GPUs (up to ``max_models_per_gpu`` each, within memory).

    What does not fit now waits in the queue; nothing is dropped.
    """
    batch_id = uuid.uuid4().hex[:12]
    try:
        reqs = [
            service.TrainingRequest(
                name=item.name, recipe=item.recipe, config=item.config, host=body.host,
                priority=body.priority, max_restarts=body.max_restarts, memory_mb=item.memory_mb,
                world_size=1, exclusive=False,
            )
            for item in body.items
        ]
        with write_in(session, settings) as sess:
            rows = service.create_trainings(sess, settings, reqs, user.name,
                                            selection={"strategy": body.strategy, "batch": batch_id})
            data = _publics(sess, rows)
    except service.TrainingRequestError as exc:
        raise _http(exc) from None
    _wake()
    return TrainingBatchPublic(batch_id=batch_id, strategy=body.strategy, data=data, count=len(data))


@router.get("", response_model=TrainingsPublic, operation_id="trainings-list")
def list_trainings(
    session: SessionDep,
    settings: SettingsDep,
    page: PageDep,
    _user: ViewerUser,
    status: Annotated[list[str] | None, Query(description="one or more statuses")] = None,
    owner: str | None = None,
) -> TrainingsPublic:
    where = []
    if status:
        bad = [s for s in status if s not in TRAINING_STATUSES]
        if bad:
            raise HTTPException(422, f"unknown status {bad[0]!r}; use one of {', '.join(TRAINING_STATUSES)}")
        where.append(Training.status.in_(status))
    if owner:
        where.append(Training.owner == owner)
    count = session.scalar(select(func.count()).select_from(Training).where(*where)) or 0
    rows = session.execute(
        select(Training).where(*where).order_by(Training.created_at.desc(), Training.id)
        .offset(page.offset).limit(page.limit)
    ).scalars()
    return TrainingsPublic(data=_readable(settings, _user, _publics(session, list(rows))), count=count)


def _readable(settings: Settings, user: AuthUser, pubs: list[TrainingPublic]) -> list[TrainingPublic]:
    """Others' configs left out where only owners and admins may read them."""
    for pub in pubs:
        if not may_read_training(settings, user, pub.owner):
            pub.config = {}
    return pubs


@router.get("/{training_id}", response_model=TrainingPublic, operation_id="trainings-get")
def get_training(
    training_id: uuid.UUID, session: SessionDep, settings: SettingsDep, _user: ViewerUser
) -> TrainingPublic:
    return _readable(settings, _user, [_public(session, _load(session, training_id))])[0]


@router.post(
    "/{training_id}/cancel", response_model=TrainingPublic, operation_id="trainings-cancel",
    responses={409: error_response("The training changed state during the cancel; send it again")},
)
def cancel_training(
    training_id: uuid.UUID, session: SessionDep, settings: SettingsDep, user: MemberUser
) -> TrainingPublic:
    ensure_can_cancel(user, _load(session, training_id).owner)
    try:
        with write_in(session, settings) as sess:
            t = service.cancel(sess, training_id, user.name)
            out = _public(sess, t)
    except service.TrainingRequestError as exc:
        raise _http(exc) from None
    _wake()  # freed GPUs may start a queued training
    return out


@router.get("/{training_id}/events", response_model=TrainingEventsPublic, operation_id="trainings-events")
def list_events(
    training_id: uuid.UUID,
    session: SessionDep,
    settings: SettingsDep,
    _user: ViewerUser,
    after_seq: SeqQuery = 0,
    limit: Annotated[int, Query(ge=1, le=5000)] = 1000,
) -> TrainingEventsPublic:
    ensure_may_read_training(settings, _user, _load(session, training_id).owner)
    rows = session.execute(
        select(TrainingEvent).where(TrainingEvent.training_id == training_id, TrainingEvent.seq > after_seq)
        .order_by(TrainingEvent.seq).limit(limit)
    ).scalars()
    data = [TrainingEventPublic.model_validate(e) for e in rows]
    return TrainingEventsPublic(data=data, count=len(data))


@router.get("/{training_id}/metrics", response_model=TrainingMetricsPublic, operation_id="trainings-metrics")
def list_metrics(
    training_id: uuid.UUID,
    session: SessionDep,
    _user: ViewerUser,
    max_points: Annotated[int, Query(ge=2, le=10000, description="downsample to at most this many rows")] = 500,
    after_step: StepQuery = -1,
) -> TrainingMetricsPublic:
    _load(session, training_id)
    where = [TrainingMetric.training_id == training_id, TrainingMetric.step > after_step]
    total = session.scalar(select(func.count()).select_from(TrainingMetric).where(*where)) or 0
    stride = max(1, -(-total // max_points))
    stmt = select(TrainingMetric).where(*where).order_by(TrainingMetric.step)
    if stride > 1:
        # Every stride-th row by step order, plus the newest, computed in SQL.
        rn = func.row_number().over(order_by=TrainingMetric.step).label("rn")
        sub = select(TrainingMetric.id, rn).where(*where).subquery()
        keep = select(sub.c.id).where(((sub.c.rn - 1) % stride == 0) | (sub.c.rn == total))
        stmt = select(TrainingMetric).where(TrainingMetric.id.in_(keep)).order_by(TrainingMetric.step)
    data = [TrainingMetricPublic.model_validate(m) for m in session.execute(stmt).scalars()]
    return TrainingMetricsPublic(data=data, count=len(data), total=total)


@router.get("/{training_id}/logs", response_model=TrainingLogPublic, operation_id="trainings-logs")
def get_logs(
    training_id: uuid.UUID,
    session: SessionDep,
    settings: SettingsDep,
    _user: ViewerUser,
    offset: Annotated[int | None, Query(ge=0, le=MAX_OFFSET, description="byte offset to read from")] = None,
    tail: Annotated[int | None, Query(ge=0, le=100000, description="the last N lines instead")] = None,
) -> TrainingLogPublic:
    ensure_may_read_training(settings, _user, _load(session, training_id).owner)
    if offset is not None and tail is not None:
        raise HTTPException(422, "give offset or tail, not both")
    chunk = read_log(log_path(settings, training_id), offset=offset, tail=tail)
    return TrainingLogPublic(offset=chunk.offset, next_offset=chunk.next_offset, size=chunk.size, text=chunk.text)
