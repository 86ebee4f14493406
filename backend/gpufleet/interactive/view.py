"""A session as the API, the client and the CLI show it (``SessionPublic``), from its two rows."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.config import SessionSettings
from gpufleet.db.interactive import TrainingSession
from gpufleet.db.models import GPUAllocation, Host
from gpufleet.wire.sessions import EndReason, SessionPublic, SessionStatus
from gpufleet.lifecycle.models import Training

WAITING = ("queued", "scheduled", "preempted")
# Session statuses -> the trainings statuses they cover (the list filter).
TRAINING_STATUSES = {
    "queued": ["queued", "scheduled", "preempted"],
    "starting": ["running"], "running": ["running"], "stopping": ["running"],
    "stopped": ["cancelled", "reclaimed", "succeeded", "failed"], "failed": ["failed"],
}


def base_url(session_id: uuid.UUID | str) -> str:
    """Where the session's notebook is served, on the Jupyter server and through gpufleet's proxy."""
    return f"/sessions/{session_id}/"


def status_of(t: Training, side: TrainingSession) -> tuple[SessionStatus, EndReason | None]:
    """The session's status and, once it ended, why (``end_reason``)."""
    if t.status in WAITING:
        return "queued", None
    if t.status == "running":
        if side.stop_reason or t.cancel_requested or t.reclaim_requested:
            return "stopping", None
        return ("running" if side.ready_at else "starting"), None
    if side.stop_reason:
        # A string column: what the stop wrote there is one of the reasons.
        return "stopped", side.stop_reason  # type: ignore[return-value]
    if t.status == "failed":
        return "failed", "failed"
    if t.status == "cancelled":
        return "stopped", "user"
    return "stopped", "failed" if t.status != "succeeded" else None


def gpus_of(sess: Session, ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[str | None, list[int]]]:
    """Each session's host and GPU indexes: its live reservation, else its newest one."""
    out: dict[uuid.UUID, tuple[str | None, list[int]]] = {}
    if not ids:
        return out
    rows = sess.execute(
        select(GPUAllocation.training_id, Host.name, GPUAllocation.gpu_index, GPUAllocation.released_at,
               GPUAllocation.allocated_at)
        .join(Host, Host.id == GPUAllocation.host_id)
        .where(GPUAllocation.training_id.in_(ids))
        .order_by(GPUAllocation.allocated_at.desc())).all()
    live = {tid for tid, _, _, released, _ in rows if released is None}
    newest: dict[uuid.UUID, datetime] = {}
    for tid, host, index, released, at in rows:  # the live reservation, else the newest (taken within a second)
        first = newest.setdefault(tid, at)
        if (released is None) if tid in live else (first - at <= timedelta(seconds=1)):
            out.setdefault(tid, (host, []))[1].append(index)
    return {tid: (h, sorted(g)) for tid, (h, g) in out.items()}


def public(settings: SessionSettings, t: Training, side: TrainingSession,
           placed: tuple[str | None, list[int]] | None = None) -> SessionPublic:
    status, end = status_of(t, side)
    host, gpu_ids = placed or (None, [])
    live = status in ("starting", "running", "stopping")
    ends_at = t.started_at + timedelta(hours=side.hours) if t.started_at else None
    stop_at = (side.idle_warned_at + timedelta(seconds=settings.session_idle_grace_s)
               if side.idle_warned_at and live and settings.session_idle_action == "stop" else None)
    return SessionPublic(
        id=str(t.id), name=t.name, owner=t.owner, mode="jupyter" if side.jupyter else "shell",
        status=status, status_reason=t.status_reason, wait_reason=t.wait_reason if status == "queued" else None,
        end_reason=end, training_status=t.status, gpus=t.requested_count or t.world_size,
        gpu_ids=gpu_ids or t.gpu_ids, host=host, memory_mb=t.memory_declared // 2**20 if t.memory_declared else None,
        priority=t.priority, preemptible=t.preemptible, hours=side.hours, created_at=t.created_at,
        started_at=t.started_at, ready_at=side.ready_at, ends_at=ends_at,
        finished_at=t.finished_at if not live and status != "queued" else None,
        idle_since=t.idle_since if live else None, idle_warned_at=side.idle_warned_at if live else None,
        idle_stop_at=stop_at,
        url=base_url(t.id) if side.jupyter and status == "running" else None,
        shell=f"gpufleet session shell {t.id}" if status in ("starting", "running") else None,
    )


def publics(sess: Session, settings: SessionSettings,
            rows: list[tuple[Training, TrainingSession]]) -> list[SessionPublic]:
    placed = gpus_of(sess, [t.id for t, _ in rows])
    return [public(settings, t, side, placed.get(t.id)) for t, side in rows]
