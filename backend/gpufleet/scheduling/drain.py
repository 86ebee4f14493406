"""Draining: an operator takes GPUs out of scheduling, and puts them back.

Draining stops new placements; trainings already on the GPU keep running. The
CLI (``gpufleet gpus drain``) and the admin-only REST route call this one
function, so both refuse the same bad input and change nothing unless every
GPU named exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.db.models import GPU, GPUAllocation, Host, Training
from gpufleet.devices.device import index_list


class DrainError(ValueError):
    """The request names a host or GPU that does not exist, or repeats a GPU."""


@dataclass(frozen=True)
class DrainResult:
    host: str
    indexes: tuple[int, ...]
    drained: bool
    reason: str | None
    # (gpu index, training name) of trainings that keep running on drained GPUs.
    still_running: tuple[tuple[int, str], ...]


def set_drained(sess: Session, host: str, indexes: list[int], drained: bool, reason: str | None) -> DrainResult:
    """Set the drained flag of ``indexes`` on ``host`` in the caller's transaction."""
    if not indexes:
        raise DrainError("name at least one GPU index")
    if len(set(indexes)) != len(indexes):
        raise DrainError(f"GPU indexes repeat: {indexes}")
    h = sess.scalar(select(Host).where(Host.name == host))
    if h is None:
        known = ", ".join(sess.scalars(select(Host.name).order_by(Host.name))) or "none"
        raise DrainError(f"host {host!r} is not registered; known hosts: {known}")
    gpus = {g.index: g for g in sess.scalars(select(GPU).where(GPU.host_id == h.id))}
    missing = [i for i in indexes if i not in gpus]
    if missing:
        have = index_list(sorted(gpus), ", ") or "none"
        raise DrainError(f"GPU {missing[0]} does not exist on host {host}; it has GPUs {have}")
    for i in indexes:
        gpus[i].drained = drained
        gpus[i].drain_reason = reason if drained else None
    running = sess.execute(
        select(GPUAllocation.gpu_index, Training.name)
        .join(Training, GPUAllocation.training_id == Training.id)
        .where(
            GPUAllocation.host_id == h.id,
            GPUAllocation.released_at.is_(None),
            GPUAllocation.gpu_index.in_(indexes),
        )
    ).all()
    return DrainResult(host, tuple(indexes), drained, reason if drained else None,
                       tuple((int(i), str(n)) for i, n in running) if drained else ())
