"""Reserving GPUs for one training in one database transaction.

No GPU is ever held by two exclusive trainings, and a shared (batch) training
never shares a GPU with an exclusive one. Three things make that true:

* PostgreSQL: the ``gpus`` rows of the host are locked (``SELECT ... FOR
  UPDATE``, always in index order so two schedulers cannot deadlock) before
  the active allocations are read, so the check and the insert are atomic.
* SQLite: the transaction starts with ``BEGIN IMMEDIATE``, which takes the
  database's write lock before the first read.
* Both: the partial unique index ``uq_gpu_allocations_exclusive_active``
  rejects a second active exclusive holder even if the code above were wrong.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.db.models import GPU, GPUAllocation, Host, Training
from gpufleet.db.session import write_session
from gpufleet.db.types import utcnow
from gpufleet.lifecycle.transitions import transition
from gpufleet.workkinds import noun

# The reservation's transaction takes the write lock first (SQLite).
reservation_session = write_session


@dataclass
class GPUState:
    """One GPU as the reservation sees it, with what holds it now."""

    gpu: GPU
    exclusive_holders: list[uuid.UUID] = field(default_factory=list)
    shared_holders: list[uuid.UUID] = field(default_factory=list)
    shared_reserved: int = 0
    shared_recipes: list[str] = field(default_factory=list)
    kinds: dict[uuid.UUID, str] = field(default_factory=dict)  # each holder's kind: a session is called one
    booked: str | None = None  # why a booking keeps it from the training being placed (scheduling.bookings)

    def holder(self, training_id: uuid.UUID) -> str:
        return f"{noun(self.kinds.get(training_id))} {training_id}"

    @property
    def index(self) -> int:
        return self.gpu.index

    @property
    def usable(self) -> bool:
        return self.gpu.enabled and not self.gpu.drained and self.gpu.status == "ok" and self.booked is None

    @property
    def idle(self) -> bool:
        return not self.exclusive_holders and not self.shared_holders

    def why_not_exclusive(self) -> str | None:
        if not self.usable:
            return self.unusable_reason()
        if self.exclusive_holders:
            return f"GPU {self.index} is held by {self.holder(self.exclusive_holders[0])}"
        if self.shared_holders:
            return f"GPU {self.index} is shared by {len(self.shared_holders)} batch training(s)"
        return None

    def why_not_shared(self, memory: int | None, max_models: int) -> str | None:
        if not self.usable:
            return self.unusable_reason()
        if self.exclusive_holders:
            return f"GPU {self.index} is held by {self.holder(self.exclusive_holders[0])}"
        if len(self.shared_holders) >= max_models:
            return f"GPU {self.index} already runs {max_models} models (max_models_per_gpu)"
        total = self.gpu.memory_total
        if memory and total and self.shared_reserved + memory > total:
            return (
                f"GPU {self.index} has {(total - self.shared_reserved) // 2**20} MiB unreserved,"
                f" needs {memory // 2**20} MiB"
            )
        return None

    def unusable_reason(self) -> str:
        if self.booked is not None:
            return self.booked
        if not self.gpu.enabled:
            return f"GPU {self.index} is disabled"
        if self.gpu.drained:
            return f"GPU {self.index} is drained" + (f": {self.gpu.drain_reason}" if self.gpu.drain_reason else "")
        return f"GPU {self.index} is {self.gpu.status}" + (
            f": {self.gpu.status_reason}" if self.gpu.status_reason else ""
        )


def lock_host_gpus(sess: Session, host_id: uuid.UUID) -> list[GPUState]:
    """Lock every GPU row of a host (PostgreSQL) and return them with their holders."""
    stmt = select(GPU).where(GPU.host_id == host_id).order_by(GPU.index)
    if sess.get_bind().dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    gpus = list(sess.execute(stmt.execution_options(populate_existing=True)).scalars())
    states = {g.id: GPUState(g) for g in gpus}
    if not states:
        return []
    rows = sess.execute(
        select(GPUAllocation.gpu_id, GPUAllocation.training_id, GPUAllocation.exclusive,
               GPUAllocation.reserved_memory, Training.recipe, Training.kind)
        .join(Training, Training.id == GPUAllocation.training_id)
        .where(GPUAllocation.gpu_id.in_(list(states)), GPUAllocation.released_at.is_(None))
    )
    for gpu_id, training_id, exclusive, reserved, recipe, kind in rows:
        st = states[gpu_id]
        st.kinds[training_id] = kind
        if exclusive:
            st.exclusive_holders.append(training_id)
        else:
            st.shared_holders.append(training_id)
            st.shared_reserved += reserved or 0
            st.shared_recipes.append(recipe)
    return list(states.values())


def reserve(
    sess: Session,
    training: Training,
    host: Host,
    chosen: Sequence[GPUState],
    *,
    selection: dict | None = None,
) -> bool:
    """Record the allocations and move the training to ``scheduled``.

    The caller has locked the GPUs (:func:`lock_host_gpus`) and checked them.
    Returns False when the training is no longer queued (cancelled meanwhile).
    """
    now = utcnow()
    indexes = [st.index for st in chosen]
    # Without a selection to record the column keeps what it holds.
    recorded: dict[str, Any] = {"selection": selection} if selection is not None else {}
    moved = transition(
        sess,
        training.id,
        ["queued"],
        "scheduled",
        reason=f"GPUs {indexes} on host {host.name}",
        data={"host": host.name, "gpu_ids": indexes},
        host_id=host.id,
        gpu_ids=indexes,
        world_size=len(indexes),
        distributed=len(indexes) > 1,
        scheduled_at=now,
        wait_reason=None,
        cancel_requested=False,
        **recorded,
    )
    if not moved:
        return False
    for st in chosen:
        sess.add(
            GPUAllocation(
                training_id=training.id,
                gpu_id=st.gpu.id,
                host_id=host.id,
                gpu_index=st.index,
                exclusive=training.exclusive,
                reserved_memory=training.memory_estimate,
                # Taken after the lock, so it is later than the release of
                # whoever held the GPU before.
                allocated_at=utcnow(),
            )
        )
    sess.flush()
    return True

