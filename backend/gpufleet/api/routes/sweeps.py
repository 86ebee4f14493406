"""Sweeps resource: start, list, show, curves, cancel."""

from __future__ import annotations

import uuid
from collections import Counter

from fastapi import APIRouter, HTTPException
from pydantic import ValidationError

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
from gpufleet.wire.sweeps import (
    SweepCurve,
    SweepCurvesPublic,
    SweepDetail,
    SweepPublic,
    SweepsPublic,
    SweepTrialPublic,
)
from gpufleet.db.session import write_in
from gpufleet.jobs.scheduler_loop import wake
from gpufleet.sweeps import service
from gpufleet.wire.sweep_requests import SweepCreate
from gpufleet.sweeps.trials import curves, trial_request

router = APIRouter(prefix="/api/v1/sweeps", tags=["sweeps"])


def _summary(row: service.Sweep, states: Counter[str]) -> dict:
    spec = row.spec
    return dict(id=row.id, name=row.name, owner=row.owner, status=row.status, status_reason=row.status_reason,
                method=spec["method"], early_stopping=spec.get("asha") is not None, metric=spec["metric"],
                direction=spec["direction"], parallel=spec["parallel"], total_trials=row.total_trials,
                trials_by_state=dict(states), best_trial=row.best_trial, created_at=row.created_at,
                finished_at=row.finished_at)


def _detail(v: service.SweepView) -> SweepDetail:
    trials = []
    for t in v.trials:
        tr = v.trainings.get(t.training_id) if t.training_id else None
        trials.append(SweepTrialPublic(
            number=t.number, params=t.params, state=t.state, metric=t.metric, metric_step=t.metric_step,
            rung=t.rung, reason=t.reason, oom_retried=t.oom_retried, training_id=t.training_id,
            training_status=tr.status if tr else None, host=tr.host.name if tr and tr.host else None,
            gpu_ids=tr.gpu_ids if tr else None, step=tr.step if tr else None, max_steps=tr.max_steps if tr else None))
    best = next((t for t in trials if t.number == v.sweep.best_trial), None)
    return SweepDetail(**_summary(v.sweep, Counter(t.state for t in v.trials)), spec=v.sweep.spec, trials=trials,
                       best=best)


def _http(exc: service.SweepRequestError) -> HTTPException:
    return HTTPException(exc.status, str(exc))


@router.post("", response_model=SweepDetail, status_code=201, operation_id="sweeps-create", responses=UNKNOWN_HOST)
def start_sweep(body: SweepCreate, session: SessionDep, settings: SettingsDep, user: CreatorUser) -> SweepDetail:
    """Start a sweep: its trials are trainings of yours, queued ``parallel`` at a time as the search goes."""
    if body.script is not None:
        ensure_can_run_code(session, user)
    try:
        template = trial_request(body, body.name, {}, max_steps=None)
    except ValidationError as exc:
        raise HTTPException(422, f"the sweep's template is not a valid training: {exc.errors()[0]['msg']}") from None
    ensure_may_rank(session, settings, user, [template])
    try:
        with write_in(session, settings) as sess:
            row = service.start(sess, settings, body, user.name, admin=user.is_admin)
            out = _detail(service.view(sess, row))
    except service.SweepRequestError as exc:
        raise _http(exc) from None
    wake()
    return out


@router.get("", response_model=SweepsPublic, operation_id="sweeps-list")
def list_sweeps(session: SessionDep, page: PageDep, _user: ViewerUser, owner: str | None = None) -> SweepsPublic:
    rows = service.page(session, owner=owner, offset=page.offset, limit=page.limit)
    data = [SweepPublic(**_summary(r, service.trial_states(session, r.id))) for r in rows]
    return SweepsPublic(data=data, count=len(data))


@router.get("/{sweep_id:uuid}", response_model=SweepDetail, operation_id="sweeps-get")
def get_sweep(sweep_id: uuid.UUID, session: SessionDep, _user: ViewerUser) -> SweepDetail:
    try:
        return _detail(service.view(session, service.get(session, sweep_id)))
    except service.SweepRequestError as exc:
        raise _http(exc) from None


@router.get("/{sweep_id:uuid}/curves", response_model=SweepCurvesPublic, operation_id="sweeps-curves")
def sweep_curves(sweep_id: uuid.UUID, session: SessionDep, _user: ViewerUser) -> SweepCurvesPublic:
    """Every trial's metric over its steps (thinned), for plotting them together."""
    try:
        v = service.view(session, service.get(session, sweep_id))
    except service.SweepRequestError as exc:
        raise _http(exc) from None
    ids = {t.training_id: t.number for t in v.trials if t.training_id}
    got = curves(session, list(ids), v.sweep.spec["metric"])
    return SweepCurvesPublic(metric=v.sweep.spec["metric"],
                             data=[SweepCurve(number=ids[tid], training_id=tid, points=pts)
                                   for tid, pts in got.items()])


@router.post("/{sweep_id:uuid}/cancel", response_model=SweepDetail, operation_id="sweeps-cancel")
def cancel_sweep(sweep_id: uuid.UUID, session: SessionDep, settings: SettingsDep, user: MemberUser) -> SweepDetail:
    """Cancel the sweep and every trial of it; idempotent."""
    try:
        ensure_can_cancel(user, service.get(session, sweep_id).owner)
        with write_in(session, settings) as sess:
            service.cancel(sess, sweep_id, user.name)
        service.stop_trials(settings, sweep_id, user.name)
        out = _detail(service.view(session, service.get(session, sweep_id)))
    except service.SweepRequestError as exc:
        raise _http(exc) from None
    wake()
    return out
