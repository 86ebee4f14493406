"""Continuing a training that ended, and starting a new one from another's checkpoint.

``resume`` is a new attempt of the same training: the same row, the same
checkpoint dir, status back to ``queued``. Its id, log, events and loss curve
carry on where they stopped, and the launcher finds its newest checkpoint
where every attempt looks (``GPUFLEET_RESUME_FROM``, a recipe's ``step-N/``),
exactly as after a preemption. Nothing is copied and nothing new to find.

A clone with changes (``from_training``) is a new training: other arguments
or config, its own curve; it records ``resumed_from`` and its first attempt
starts from a copy of the source's newest checkpoint
(``engine.resumepoint.seed_from``), so the source stays as it was.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.orm import Session

from gpufleet import workkinds
from gpufleet.lifecycle.models import Training
from gpufleet.lifecycle.transitions import get_training, transition
from gpufleet.engine.config import TrainingConfigError
from gpufleet.engine.recipes import get_recipe
from gpufleet.trainings.admission.checks import TrainingRequestError
from gpufleet.wire.training_requests import TrainingCreate, TrainingResume

RESUMABLE = ("succeeded", "failed", "cancelled", "reclaimed", "pruned")


def source_of(sess: Session, req: TrainingCreate, owner: str, admin: bool) -> uuid.UUID | None:
    """The training a new one starts from (``from_training``), checked: it exists, is of the same kind, and
    is the caller's (or the caller is an admin)."""
    if req.from_training is None:
        return None
    src = get_training(sess, req.from_training)
    if src is None:
        raise TrainingRequestError("from_training", f"training {req.from_training} does not exist")
    if src.owner != owner and not admin:
        raise TrainingRequestError("from_training", f"training {src.id} belongs to {src.owner!r}; only its owner "
                                   "and admins may start from its checkpoints", status=403)
    if src.kind != req.kind or (workkinds.of(req.kind).runs_recipe and src.recipe != req.recipe):
        what = f"a {src.kind} training" + (f" of recipe {src.recipe}" if workkinds.of(src.kind).runs_recipe else "")
        raise TrainingRequestError("from_training", f"training {src.id} is {what}; a new training starts from a "
                                   "checkpoint of its own kind and recipe")
    return src.id


def _config_with(t: Training, changes: dict[str, Any]) -> dict[str, Any]:
    if not changes:
        return {}
    if not workkinds.of(t.kind).runs_recipe:
        raise TrainingRequestError("config", f"a {t.kind} training has no config to change: its arguments are its "
                                   "argv; start a new one from its checkpoint instead (`gpufleet run --from ID`)")
    try:
        cfg = get_recipe(t.recipe).resolve_config({**t.config, **changes})
        cfg.batch_layout(t.world_size)
    except TrainingConfigError as exc:
        problems = [(f"config.{f}" if f else "config", m) for f, m in exc.problems]
        raise TrainingRequestError(problems[0][0], str(exc), problems=problems) from None
    return {"config": cfg.to_dict(), "max_steps": cfg.max_steps, "checkpoint_every": cfg.checkpoint_every}


def resume(sess: Session, training_id: uuid.UUID, body: TrainingResume, user: str) -> Training:
    """Put an ended training back in the queue; its next attempt continues from its newest checkpoint.

    The restart budget starts afresh. Permission (its owner or an admin) is the caller's to check.
    """
    t = get_training(sess, training_id)
    if t is None:
        raise TrainingRequestError("id", f"training {training_id} does not exist", status=404)
    if t.status not in RESUMABLE:
        raise TrainingRequestError("id", f"training {t.id} is {t.status}; only an ended training "
                                   f"({', '.join(RESUMABLE)}) can be resumed", status=409)
    values = _config_with(t, body.config)
    if t.auto_select:
        values.update(gpu_ids=None, host_id=None)  # the server chose the GPUs; it may choose others now
    where = (f"its newest checkpoint ({t.last_checkpoint.rsplit('/', 1)[-1]})" if t.last_checkpoint
             else "its newest checkpoint, if it has one")
    changed = f"; config changed: {', '.join(sorted(body.config))}" if body.config else ""
    ok = transition(sess, t.id, [t.status], "queued", reason=f"resumed by {user}: continues from {where}{changed}",
                    user=user, data={"resumed": True, "from_status": t.status}, restarts=0, exit_code=None,
                    cancel_requested=False, finished_at=None, not_before=None, **values)
    if not ok:
        raise TrainingRequestError("id", "the training changed state during the resume; try again", status=409)
    return get_training(sess, t.id)  # type: ignore[return-value]
