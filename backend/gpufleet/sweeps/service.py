"""Starting, cancelling and reading sweeps: what the REST routes call.

A start checks the whole sweep before writing anything: the template as a
training request (recipe, host, code, permissions' inputs), and every
extreme of the search space against the recipe's config bounds, so a sweep
does not fail at its fortieth trial. Each function works in the caller's
session and leaves the commit to it; Optuna's study is made at start (its own
storage commits at once; a study without a sweep row is harmless).
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.config import Settings, StoreSettings
from gpufleet.db.sweeps import Sweep, SweepTrial
from gpufleet.db.types import utcnow
from gpufleet.pools import placement, service as pools
from gpufleet.sweeps import study as studies
from gpufleet.wire.sweep_requests import SpaceRange, SweepCreate
from gpufleet.sweeps.trials import trial_request
from gpufleet.engine.config import TrainingConfigError
from gpufleet.engine.recipes import get_recipe
from gpufleet.trainings import service as trainings
from gpufleet.trainings.admission.checks import TrainingRequestError
from gpufleet.lifecycle.models import Training


class SweepRequestError(ValueError):
    def __init__(self, field: str, message: str, status: int = 422):
        super().__init__(message)
        self.field, self.status = field, status


def _extremes(spec: SweepCreate) -> list[dict[str, Any]]:
    """One parameter set per extreme value of each parameter (the others at their first value)."""
    ends = {n: ([e.low, e.high] if isinstance(e, SpaceRange) else list(e)) for n, e in spec.space.items()}
    first = {n: v[0] for n, v in ends.items()}
    return [first] + [dict(first, **{n: v}) for n, vs in ends.items() for v in vs[1:]]


def check(sess: Session, settings: Settings, spec: SweepCreate, owner: str, admin: bool) -> None:
    if spec.recipe is not None:
        try:
            fields = set(get_recipe(spec.recipe).config_cls.model_fields)
        except (KeyError, TrainingConfigError) as exc:
            raise SweepRequestError("recipe", str(exc)) from None
        unknown = sorted(set(spec.space) - fields)
        if unknown:
            raise SweepRequestError("space", f"space names {', '.join(unknown)}, which recipe {spec.recipe} has no "
                                    f"config field for; its fields: {', '.join(sorted(fields))}")
    for i, params in enumerate(_extremes(spec)[:200]):
        try:
            req = trial_request(spec, f"{spec.name}-check", params, max_steps=None)
            if spec.recipe is not None:
                get_recipe(spec.recipe).resolve_config(req.config)
            if i == 0:  # the place's side (host or pool, code, memory, account) is the same for every trial
                placement.where(req).check(sess, settings, req, owner, exclusive=spec.script is not None,
                                           admin=admin)
        except (TrainingConfigError, ValidationError) as exc:
            where = ", ".join(f"{n}={v!r}" for n, v in params.items())
            raise SweepRequestError("space", f"the trial with {where} is not a valid config: {exc}") from None
        except TrainingRequestError as exc:
            raise SweepRequestError(exc.field or "space", str(exc), exc.status) from None
        except pools.PoolError as exc:
            raise SweepRequestError(exc.field or "pool", str(exc), exc.status) from None


def start(sess: Session, settings: Settings, spec: SweepCreate, owner: str, *, admin: bool = False) -> Sweep:
    """Check the sweep, make its study and its row; the driver starts its trials. The caller commits."""
    check(sess, settings, spec, owner, admin)
    sid = uuid.uuid4()
    row = Sweep(id=sid, name=spec.name.strip(), owner=owner, admin=admin, status="running",
                spec=spec.model_dump(mode="json"), total_trials=spec.total_trials(), study_name=f"gpufleet-{sid}")
    studies.create(settings, row.study_name, spec)
    sess.add(row)
    sess.flush()
    return row


def get(sess: Session, sweep_id: uuid.UUID) -> Sweep:
    row = sess.get(Sweep, sweep_id)
    if row is None:
        raise SweepRequestError("id", f"sweep {sweep_id} does not exist", status=404)
    return row


def cancel(sess: Session, sweep_id: uuid.UUID, user: str) -> Sweep:
    """Mark the sweep and its open trials cancelled (idempotent); :func:`stop_trials` then stops their trainings.

    Two steps, so no transaction locks many training rows at once (the scheduler and the workers lock them
    too, in their own order); the driver finishes the second step if the server stops between them.
    """
    row = sess.execute(select(Sweep).where(Sweep.id == sweep_id).with_for_update()).scalar_one_or_none()
    if row is None:
        raise SweepRequestError("id", f"sweep {sweep_id} does not exist", status=404)
    if row.status != "running":
        return row
    row.status, row.status_reason, row.finished_at = "cancelled", f"cancelled by {user}", utcnow()
    for trial in sess.scalars(select(SweepTrial).where(SweepTrial.sweep_id == sweep_id)):
        if trial.state in ("running", "rung"):
            trial.state, trial.reason = "cancelled", f"the sweep was cancelled by {user}"
    return row


def stop_trials(settings: StoreSettings, sweep_id: uuid.UUID, user: str) -> int:
    """Cancel every training of a cancelled sweep that has not ended, each in its own transaction."""
    from gpufleet.db.session import session_scope, write_session
    from gpufleet.lifecycle.models import FINAL_STATUSES

    with session_scope(settings) as sess:
        ids = list(sess.scalars(select(Training.id).where(
            Training.sweep_id == sweep_id, Training.status.not_in(FINAL_STATUSES),
            Training.cancel_requested.is_(False)).order_by(Training.id)))
    for tid in ids:
        with write_session(settings) as sess:
            trainings.cancel(sess, tid, user)
    return len(ids)


@dataclass
class SweepView:
    sweep: Sweep
    trials: list[SweepTrial]
    trainings: dict[uuid.UUID, Training] = field(default_factory=dict)


def view(sess: Session, row: Sweep) -> SweepView:
    trials = list(sess.scalars(select(SweepTrial).where(SweepTrial.sweep_id == row.id).order_by(SweepTrial.number)))
    ids = [t.training_id for t in trials if t.training_id is not None]
    rows = {t.id: t for t in sess.scalars(select(Training).where(Training.id.in_(ids)))} if ids else {}
    return SweepView(row, trials, rows)


def page(sess: Session, *, owner: str | None, offset: int, limit: int) -> list[Sweep]:
    q = select(Sweep).order_by(Sweep.created_at.desc()).offset(offset).limit(limit)
    if owner:
        q = q.where(Sweep.owner == owner)
    return list(sess.scalars(q))


def trial_states(sess: Session, sweep_id: uuid.UUID) -> Counter[str]:
    from sqlalchemy import func

    rows = sess.execute(select(SweepTrial.state, func.count()).where(SweepTrial.sweep_id == sweep_id)
                        .group_by(SweepTrial.state))
    return Counter({s: n for s, n in rows})
