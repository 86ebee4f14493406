"""Selection for one training: estimate (calibrated), recommendation, what to store.

Used by the recommend endpoint (with a full training config), the CLI, and the
code that creates trainings without ``gpu_ids``: the estimate, the chosen set
and its reasons go to ``trainings.memory_estimate``/``estimate``/
``estimate_key``/``selection``, or the reason it waits to ``wait_reason``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.config import Settings
from gpufleet.db.models import GPU, Host
from gpufleet.scheduling.calibration import calibration_for
from gpufleet.scheduling.estimate import MemoryEstimate, estimate_memory_requirement
from gpufleet.scheduling.inputs import fleet_state
from gpufleet.scheduling.memory import estimate_key, resolve_strategy
from gpufleet.scheduling.recommend import recommend
from gpufleet.scheduling.types import Policy, Recommendation, SelectionRequest


@dataclass(frozen=True)
class SelectionPlan:
    estimate: MemoryEstimate
    recommendation: Recommendation


def estimate_for(
    sess: Session, recipe: str, config: Mapping[str, Any] | Any, *, world_size: int = 1,
    backend: str = "cuda", data_root: Any = None,
) -> MemoryEstimate:
    """The estimate, corrected by earlier runs of the same recipe and shape."""
    from gpufleet.engine.recipes import get_recipe

    cfg = get_recipe(recipe).resolve_config(dict(config)) if isinstance(config, Mapping) else config
    micro, accum = cfg.batch_layout(world_size)
    key = estimate_key(recipe, cfg.to_dict(), micro_batch=micro, accum=accum, precision=cfg.precision,
                       strategy=resolve_strategy(cfg.strategy, world_size), world_size=world_size)
    return estimate_memory_requirement(
        recipe, cfg, world_size=world_size, backend=backend, calibration=calibration_for(sess, key),
        data_root=data_root, context_bytes=measured_context(sess, backend),
    )


def _gpu_rows(sess: Session) -> Sequence[Any]:
    """Every GPU's host name, backend, memory and measured context, read once per session.

    A create needs them twice (the context for its estimate, the memory for the
    never-fit rule); one read keeps a create at the statements it had.
    """
    rows = sess.info.get("gpufleet.plan.gpu_rows")
    if rows is None:
        rows = sess.execute(select(Host.name, GPU.backend, GPU.memory_total, GPU.context_bytes)
                            .join(Host, Host.id == GPU.host_id)).all()
        sess.info["gpufleet.plan.gpu_rows"] = rows
    return rows


def measured_context(sess: Session, backend: str = "cuda") -> int | None:
    """The largest context the fleet's agents measured on GPUs of ``backend``, or None."""
    measured = [r.context_bytes for r in _gpu_rows(sess) if r.backend == backend and r.context_bytes is not None]
    return max(measured, default=None)


def plan_selection(
    sess: Session, settings: Settings, recipe: str, config: Mapping[str, Any] | Any, *,
    count: int = 1, host: str | None = None, exclusive: bool = True, policy: Policy = "pack",
    max_candidates: int = 5,
) -> SelectionPlan:
    est = estimate_for(sess, recipe, config, world_size=count, data_root=settings.data_root)
    fleet = fleet_state(sess, settings, settings, settings, settings, host=host, estimate_key=est.key)
    req = SelectionRequest(memory_bytes=est.total, count=count, host=host, exclusive=exclusive,
                           policy=policy, max_candidates=max_candidates)
    return SelectionPlan(estimate=est, recommendation=recommend(req, fleet))


def estimate_training(
    sess: Session, training: Any, *, backend: str = "cuda", data_root: Any = None, config: Any = None
) -> MemoryEstimate:
    """Estimate a new ``Training`` row from its recipe and config and store the estimate.

    ``config`` is the row's config already validated by its recipe, if the
    caller has it (else it is read from the row). A memory figure the user gave
    (``memory_estimate`` already set) is kept as what to reserve; the traced
    estimate is stored beside it for comparison and calibration.
    """
    est = estimate_for(sess, training.recipe, config if config is not None else (training.config or {}),
                       world_size=training.world_size or 1, backend=backend, data_root=data_root)
    if training.memory_estimate is None:
        training.memory_estimate = est.total
    training.estimate = est.to_dict()
    training.estimate_key = est.key
    return est


def never_fit_reason(sess: Session, memory_bytes: int | None, host: str | None = None) -> str | None:
    """The never-fit rule for memory against the registered GPUs (of ``host`` when given)."""
    from gpufleet.scheduling.validate import memory_never_fits

    totals = [r.memory_total for r in _gpu_rows(sess) if host is None or r.name == host]
    return memory_never_fits(memory_bytes, totals, f"host {host}" if host else "the fleet")

