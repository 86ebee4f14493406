"""Creating, reading, stopping and extending sessions: what the routes and the CLI call.

A bad request raises :class:`TrainingRequestError` (field, message, status)
before anything is written; every function works in the caller's session and
leaves the commit to it.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from gpufleet.config import SchedulerSettings, SessionSettings
from gpufleet.db.interactive import TrainingSession
from gpufleet.db.models import GPU, Host
from gpufleet.scheduling.hosts import UnknownHost
from gpufleet.trainings import service as trainings
from gpufleet.trainings.admission.checks import TrainingRequestError, refuse_never_fits
from gpufleet.lifecycle.transitions import record_event, record_first_event
from gpufleet.lifecycle.models import FINAL_STATUSES, Training, new_training
from gpufleet.interactive.limits import max_hours_for
from gpufleet.users.groups import priority_cap
from gpufleet.wire.sessions import SessionCreate

KIND = "session"
RECIPE = "session"  # the trainings row's recipe column: a session runs no recipe


def create(sess: Session, settings: SessionSettings, req: SessionCreate,
           owner: str) -> tuple[Training, TrainingSession]:
    """Check ``req`` against the fleet and the owner's limits; queue the session."""
    host = _host(sess, req.host)
    _check_gpus(sess, req.gpus, host)
    memory = req.memory_mb * 2**20 if req.memory_mb else None
    if memory:
        try:
            refuse_never_fits(sess, memory, host)
        except TrainingRequestError as exc:
            raise TrainingRequestError("memory_mb", str(exc).replace("this training", "this session")) from None
    hours = req.hours if req.hours is not None else settings.session_default_hours
    limit = max_hours_for(sess, settings, owner)
    if hours > limit.hours:
        raise TrainingRequestError("hours", f"a session of yours may last at most {limit.hours:g} hours "
                                            f"({limit.source}); ask for --hours {limit.hours:g} or less")
    tid = uuid.uuid4()
    mode = "jupyter" if req.jupyter else "shell"
    row = new_training(
        kind=KIND, recipe=RECIPE, owner=owner, name=req.name or f"{mode}-{owner}-{tid.hex[:6]}",
        world_size=req.gpus, priority=req.priority, preemptible=req.preemptible, id=tid,
        distributed=False,  # one process holding the GPUs, however many
        requested_host=req.host, memory_declared=memory, memory_estimate=memory,
    )
    side = TrainingSession(training_id=tid, jupyter=req.jupyter, hours=hours, ended_recorded=False)
    sess.add(row)
    sess.flush()
    sess.add(side)
    record_first_event(sess, row, "status", status="queued", user=owner,
                       reason=f"{mode} session submitted for {req.gpus} GPU(s) for {hours:g}h")
    return row, side


def check_priority(sess: Session, settings: SchedulerSettings, priority: int, owner: str, role: str) -> None:
    """403 when a member asks for a priority above their cap (as for trainings)."""
    if role == "admin" or priority <= 0:
        return
    cap = priority_cap(sess, owner, settings.member_max_priority)
    if priority > cap.value:
        raise TrainingRequestError("priority", f"priority {priority} is above {cap.value}, the highest {owner!r} "
                                               f"may ask for ({cap.describe()}); lower the priority", status=403)


def _host(sess: Session, name: str | None) -> Host | None:
    if not name:
        return None
    host = sess.scalar(select(Host).where(Host.name == name))
    if host is None:
        known = list(sess.scalars(select(Host.name).order_by(Host.name)))
        raise TrainingRequestError("host", str(UnknownHost(name, known)), status=404)
    return host


def _check_gpus(sess: Session, gpus: int, host: Host | None) -> None:
    """A session runs on one host: refuse a count no host (or not the named one) has."""
    q = select(func.count(GPU.id)).where(GPU.enabled.is_(True))
    if host is not None:
        most = sess.scalar(q.where(GPU.host_id == host.id)) or 0
        where = f"host {host.name} has {most}"
    else:
        most = max(sess.scalars(q.group_by(GPU.host_id)), default=0)
        where = f"the largest host has {most}" if most else "no GPU host has registered yet"
    if most and gpus > most:
        raise TrainingRequestError("gpus", f"a session runs on one host and asks for {gpus} GPUs; {where}")


def get(sess: Session, session_id: uuid.UUID) -> tuple[Training, TrainingSession]:
    """The session, read afresh; a 404 error when there is none."""
    t = sess.get(Training, session_id, populate_existing=True)
    side = sess.get(TrainingSession, session_id, populate_existing=True) if t is not None else None
    if t is None or side is None:  # a row with no session side is a training
        raise TrainingRequestError("id", f"session {session_id} does not exist", status=404)
    return t, side


def page(sess: Session, *, owner: str | None, statuses: list[str] | None, offset: int,
         limit: int) -> tuple[list[tuple[Training, TrainingSession]], int]:
    """Sessions, newest first; ``statuses`` are training statuses (the caller maps session ones)."""
    q = select(Training, TrainingSession).join(TrainingSession, TrainingSession.training_id == Training.id)
    if owner:
        q = q.where(Training.owner == owner)
    if statuses:
        q = q.where(Training.status.in_(statuses))
    total = sess.scalar(select(func.count()).select_from(q.subquery())) or 0
    rows = sess.execute(q.order_by(Training.created_at.desc(), Training.id).offset(offset).limit(limit)).all()
    return [(t, s) for t, s in rows], total


def stop(sess: Session, session_id: uuid.UUID, user: str) -> tuple[Training, TrainingSession]:
    """Stop a session (a cancel of its row); idempotent. Its GPUs are released when its process ended."""
    t, side = get(sess, session_id)
    if t.status not in FINAL_STATUSES and side.stop_reason is None:
        sess.execute(update(TrainingSession).where(TrainingSession.training_id == t.id,
                                                   TrainingSession.stop_reason.is_(None))
                     .values(stop_reason="user", stopped_by=user).execution_options(synchronize_session=False))
    trainings.cancel(sess, t.id, user)
    return get(sess, session_id)


def extend(sess: Session, settings: SessionSettings, session_id: uuid.UUID, user: str,
           hours: float) -> tuple[Training, TrainingSession]:
    """Add ``hours`` to a session's time limit, up to its owner's maximum."""
    t, side = get(sess, session_id)
    if t.status in FINAL_STATUSES:
        raise TrainingRequestError("id", f"session {session_id} has ended ({t.status}); start a new one",
                                   status=409)
    limit = max_hours_for(sess, settings, t.owner)
    total = side.hours + hours
    if total > limit.hours + 1e-9:
        left = max(0.0, limit.hours - side.hours)
        raise TrainingRequestError("hours", f"the session would last {total:g} hours; sessions of {t.owner} may "
                                            f"last at most {limit.hours:g} hours ({limit.source}), so at most "
                                            f"{left:g} more can be added")
    sess.execute(update(TrainingSession).where(TrainingSession.training_id == t.id)
                 .values(hours=TrainingSession.hours + hours).execution_options(synchronize_session=False))
    ends = f"; it now ends at {(t.started_at + timedelta(hours=total)).isoformat()}" if t.started_at else ""
    record_event(sess, t.id, "info", status=t.status, user=user,
                 reason=f"time limit extended by {hours:g}h to {total:g}h by {user}{ends}",
                 data={"hours": total, "added": hours})
    return get(sess, session_id)


def record_join(sess: Session, session_id: uuid.UUID, admin: str) -> None:
    """An admin opens a notebook that is not hers: an explicit step, on the session's record."""
    t, _ = get(sess, session_id)
    record_event(sess, t.id, "info", status=t.status, user=admin,
                 reason=f"{admin} (admin) joined {t.owner}'s notebook: her browser can run code in it as {t.owner}",
                 data={"joined_by": admin})
