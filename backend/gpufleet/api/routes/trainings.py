"""Trainings resource: create (one or a batch), read, events, metrics, logs, cancel."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query

from gpufleet.api.readers import ensure_may_read_training
from gpufleet.api.deps import (
    CreatorUser,
    MemberUser,
    PageDep,
    SessionDep,
    SettingsDep,
    ViewerUser,
    ensure_can_cancel,
    ensure_can_run_code,
    ensure_may_rank,
)
from gpufleet.api.hosts import UNKNOWN_HOST
from gpufleet.api.params import SeqQuery, StepQuery
from gpufleet.api.training_answers import http_error, load, publics, readable
from gpufleet.wire.trainings import (
    TrainingBatchPublic,
    TrainingEventPublic,
    TrainingEventsPublic,
    TrainingLogPublic,
    TrainingMetricPublic,
    TrainingMetricsPublic,
    TrainingPublic,
    TrainingsPublic,
    TrainingStatus,
)
from gpufleet.api.security.openapi import error_response
from gpufleet import workkinds
from gpufleet.bounds import MAX_OFFSET
from gpufleet.db.session import write_in
from gpufleet.jobs.scheduler_loop import wake
from gpufleet.pools import placement, service as pools
from gpufleet.trainings import log_store, service
from gpufleet.wire.training_requests import TrainingBatchCreate, TrainingCreate

router = APIRouter(prefix="/api/v1/trainings", tags=["trainings"])
# Under GPUFLEET_TRAINING_VISIBILITY=owner (the default) another user's training's events and logs are a 403.
OWNER_ONLY: dict[int | str, dict[str, Any]] = {
    403: error_response("The training is another user's; its events and logs are its owner's and the admins'"),
}


@router.post("", response_model=TrainingPublic, status_code=201, operation_id="trainings-create",
             responses=UNKNOWN_HOST)
def create_training(
    body: TrainingCreate, session: SessionDep, settings: SettingsDep, user: CreatorUser
) -> TrainingPublic:
    if workkinds.of(body.kind).runs_member_code:
        ensure_can_run_code(session, user)
    ensure_may_rank(session, settings, user, [body])
    try:
        # The request's own session (the auth and rate-limit checks read
        # through it): a burst never holds one connection while waiting for another.
        with write_in(session, settings) as sess:
            # The team's scheduler; or a pool's, asked for, or when the team's hosts can never hold it (or_pool).
            [out] = publics([placement.create_placed(sess, settings, body, user.name, admin=user.is_admin)])
    except service.TrainingRequestError as exc:
        raise http_error(exc) from None
    except pools.PoolError as exc:
        raise HTTPException(exc.status, str(exc)) from None
    wake()
    return out


@router.post("/batch", response_model=TrainingBatchPublic, status_code=201, operation_id="trainings-create-batch",
             responses=UNKNOWN_HOST)
def create_batch(
    body: TrainingBatchCreate, session: SessionDep, settings: SettingsDep, user: CreatorUser
) -> TrainingBatchPublic:
    """Many small trainings sharing GPUs (up to ``max_models_per_gpu`` each, within memory).

    What does not fit now waits in the queue; nothing is dropped.
    """
    ensure_may_rank(session, settings, user, body.requests())
    try:
        with write_in(session, settings) as sess:
            batch_id, views = service.create_batch(sess, settings, body, user.name)
            data = publics(views)
    except service.TrainingRequestError as exc:
        raise http_error(exc) from None
    wake()
    return TrainingBatchPublic(batch_id=batch_id, strategy=body.strategy, data=data, count=len(data))


@router.get("", response_model=TrainingsPublic, operation_id="trainings-list")
def list_trainings(
    session: SessionDep,
    settings: SettingsDep,
    page: PageDep,
    _user: ViewerUser,
    status: Annotated[list[TrainingStatus] | None, Query(description="one or more statuses")] = None,
    owner: str | None = None,
    ref: Annotated[str | None, Query(
        min_length=1, max_length=255,
        description="only the trainings this names: a name, an ID, or the start of an ID (as `gpufleet trainings "
                    "ls` shows it, 8 characters); clients resolve a short ID or a name with it")] = None,
    sessions: Annotated[bool, Query(description="also interactive sessions (listed with their own statuses at "
                                                "/api/v1/sessions); a ref finds them either way")] = False,
) -> TrainingsPublic:
    try:
        views, count = service.page(session, statuses=status, owner=owner, offset=page.offset, limit=page.limit,
                                    ref=ref, sessions=sessions)
    except service.TrainingRequestError as exc:
        raise http_error(exc) from None
    data = publics(service.with_standing(session, settings, views))
    return TrainingsPublic(data=readable(settings, _user, data), count=count)


@router.get("/{training_id:uuid}", response_model=TrainingPublic, operation_id="trainings-get")
def get_training(
    training_id: uuid.UUID, session: SessionDep, settings: SettingsDep, _user: ViewerUser
) -> TrainingPublic:
    views = service.views(session, [load(session, training_id)])
    return readable(settings, _user, publics(service.with_standing(session, settings, views)))[0]


@router.post(
    "/{training_id:uuid}/cancel", response_model=TrainingPublic, operation_id="trainings-cancel",
    responses={409: error_response("The training changed state during the cancel; send it again")},
)
def cancel_training(
    training_id: uuid.UUID, session: SessionDep, settings: SettingsDep, user: MemberUser
) -> TrainingPublic:
    ensure_can_cancel(user, load(session, training_id).owner)
    try:
        with write_in(session, settings) as sess:
            t = service.cancel(sess, training_id, user.name)
            [out] = publics(service.views(sess, [t]))
    except service.TrainingRequestError as exc:
        raise http_error(exc) from None
    wake()  # freed GPUs may start a queued training
    return out


@router.get("/{training_id:uuid}/events", response_model=TrainingEventsPublic, operation_id="trainings-events",
            responses=OWNER_ONLY)
def list_events(
    training_id: uuid.UUID,
    session: SessionDep,
    settings: SettingsDep,
    _user: ViewerUser,
    after_seq: SeqQuery = 0,
    limit: Annotated[int, Query(ge=1, le=5000)] = 1000,
) -> TrainingEventsPublic:
    ensure_may_read_training(settings, _user, load(session, training_id).owner)
    rows = service.events(session, training_id, after_seq=after_seq, limit=limit)
    data = [TrainingEventPublic.model_validate(e) for e in rows]
    return TrainingEventsPublic(data=data, count=len(data))


@router.get("/{training_id:uuid}/metrics", response_model=TrainingMetricsPublic, operation_id="trainings-metrics")
def list_metrics(
    training_id: uuid.UUID,
    session: SessionDep,
    _user: ViewerUser,
    max_points: Annotated[int, Query(ge=2, le=10000, description="downsample to at most this many rows")] = 500,
    after_step: StepQuery = -1,
) -> TrainingMetricsPublic:
    try:
        rows, total = service.metrics(session, training_id, max_points=max_points, after_step=after_step)
    except service.TrainingRequestError as exc:
        raise http_error(exc) from None
    data = [TrainingMetricPublic.model_validate(m) for m in rows]
    return TrainingMetricsPublic(data=data, count=len(data), total=total)


@router.get("/{training_id:uuid}/logs", response_model=TrainingLogPublic, operation_id="trainings-logs",
            responses=OWNER_ONLY)
def get_logs(
    training_id: uuid.UUID,
    session: SessionDep,
    settings: SettingsDep,
    _user: ViewerUser,
    offset: Annotated[int | None, Query(ge=0, le=MAX_OFFSET, description="byte offset to read from")] = None,
    tail: Annotated[int | None, Query(ge=0, le=100000, description="the last N lines instead")] = None,
) -> TrainingLogPublic:
    ensure_may_read_training(settings, _user, load(session, training_id).owner)
    if offset is not None and tail is not None:
        raise HTTPException(422, "give offset or tail, not both")
    chunk = log_store.read_training_log(session, settings, training_id, offset=offset, tail=tail)
    return TrainingLogPublic(offset=chunk.offset, next_offset=chunk.next_offset, size=chunk.size, text=chunk.text)
