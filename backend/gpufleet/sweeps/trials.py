"""A trial as a training: the request a parameter set makes, and the metric its training reported."""

from __future__ import annotations

import re
import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.wire.sweep_requests import SweepCreate
from gpufleet.lifecycle.models import TrainingMetric
from gpufleet.wire.training_requests import TrainingCreate


def _fill(arg: str, params: dict[str, Any]) -> str:
    def sub(m: re.Match[str]) -> str:
        return str(params[m.group(1)]) if m.group(1) in params else m.group(0)

    return re.sub(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", sub, arg)


def trial_request(spec: SweepCreate, name: str, params: dict[str, Any], *, max_steps: int | None) -> TrainingCreate:
    """The training of one trial: the template with the parameters in place (``max_steps``: stop at a rung)."""
    common: dict[str, Any] = dict(name=name[:255], host=spec.host, pool=spec.pool, priority=spec.priority,
                                  max_restarts=spec.max_restarts)
    if spec.script is not None:
        s = spec.script
        return TrainingCreate(kind="script", code=s.code, argv=[_fill(a, params) for a in s.argv], env=s.env,
                              memory=s.memory, python=s.python, requirements=s.requirements,
                              memory_mb=spec.memory_mb, **common)
    config = {**spec.config, **params}
    if max_steps is not None:
        config["max_steps"] = max_steps
    return TrainingCreate(recipe=spec.recipe, config=config, memory_mb=spec.memory_mb, **common)


# A script trial with no asha.max_steps: rungs go on (x factor each) for as long as it reports steps.
UNBOUNDED_STEPS = 2**62


def full_steps(spec: SweepCreate, params: dict[str, Any]) -> int:
    """A trial's whole length: a recipe's max_steps (searched, set in the config, or the recipe's default),
    a script's ``asha.max_steps`` (unbounded when not given: its steps are its own)."""
    from gpufleet.engine.recipes import get_recipe

    if spec.script is not None:
        return (spec.asha.max_steps if spec.asha is not None else None) or UNBOUNDED_STEPS

    return int(get_recipe(spec.recipe or "").resolve_config({**spec.config, **params}).max_steps)


def metric_at(sess: Session, training_id: uuid.UUID, name: str, step: int | None = None) -> tuple[int, float] | None:
    """The newest (step, value) of metric ``name`` the training reported, at or before ``step``."""
    q = select(TrainingMetric.step, TrainingMetric.loss, TrainingMetric.metrics).where(
        TrainingMetric.training_id == training_id)
    if step is not None:
        q = q.where(TrainingMetric.step <= step)
    for s, loss, metrics in sess.execute(q.order_by(TrainingMetric.step.desc()).limit(200)):
        value = loss if name == "loss" else (metrics or {}).get(name)
        if isinstance(value, (int, float)) and value == value:  # NaN is no value
            return s, float(value)
    return None


def curves(sess: Session, training_ids: list[uuid.UUID], name: str, points: int = 200) -> dict[uuid.UUID, list]:
    """Each training's metric over its steps, thinned to at most ``points`` (the sweep page's overlay)."""
    out: dict[uuid.UUID, list] = {tid: [] for tid in training_ids}
    if not training_ids:
        return out
    q = select(TrainingMetric.training_id, TrainingMetric.step, TrainingMetric.loss, TrainingMetric.metrics).where(
        TrainingMetric.training_id.in_(training_ids)).order_by(TrainingMetric.training_id, TrainingMetric.step)
    for tid, step, loss, metrics in sess.execute(q):
        value = loss if name == "loss" else (metrics or {}).get(name)
        if isinstance(value, (int, float)) and value == value:
            out[tid].append([step, float(value)])
    return {tid: pts[:: max(1, len(pts) // points)] for tid, pts in out.items()}
