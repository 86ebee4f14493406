"""Idle reclaim: a running training whose GPUs sit idle is warned, then (policy ``stop``) stopped.

The scheduler loop calls :func:`watch` every few seconds. For every running
training it reads the telemetry history (``gpu_metrics_history``, written by
each host's agent) of the GPUs it holds since its attempt began:

- ``idle_since`` is when its GPUs were last seen at or above
  ``idle_threshold_percent`` utilisation (or when the attempt began, if
  never), while the newest sample of every one of them is below it; a busy
  sample clears it. The dashboard shows an *idle* badge from it.
- Once idle for ``idle_window_s`` the training gets a ``warning`` event
  (``idle_warned_at``). Under ``idle_action: stop`` it is also asked to stop
  (``reclaim_requested``): its supervisor checkpoints it and writes
  ``reclaimed`` (gpufleet.jobs.stops), which frees its GPUs.

Without fresh samples (no agent on the host, or it stopped) nothing is
judged: a training is never called idle for lack of data.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime, timedelta

from sqlalchemy import and_, case, func, or_, select, update

from gpufleet.config import SchedulerSettings, Settings, StoreSettings, TelemetrySettings
from gpufleet.db.models import GPUAllocation, GPUMetricsHistory, Training, TrainingEvent
from gpufleet.db.session import session_scope, write_session
from gpufleet.db.types import utcnow
from gpufleet.lifecycle.transitions import record_event
from gpufleet.workkinds import names

log = logging.getLogger(__name__)

CHECK_EVERY_S = 5.0
_last_check: dict[str, float] = {}


def fresh_after(settings: TelemetrySettings) -> timedelta:
    """How old the newest sample may be and still say what the GPU does now."""
    return timedelta(seconds=max(30.0, 5 * settings.sample_interval_s))


def watch_due(settings: Settings) -> list[tuple[uuid.UUID, str]]:
    """:func:`watch`, at most every ``CHECK_EVERY_S`` per database (the scheduler loop ticks faster)."""
    key = settings.effective_database_url
    if time.monotonic() - _last_check.get(key, 0.0) < CHECK_EVERY_S:
        return []
    _last_check[key] = time.monotonic()
    return watch(settings, settings, settings)


def watch(scheduler_settings: SchedulerSettings, store_settings: StoreSettings, telemetry_settings: TelemetrySettings,
          now: datetime | None = None) -> list[tuple[uuid.UUID, str]]:
    """Track idle GPUs of running trainings; returns (training, what was done) for warnings and reclaims."""
    if scheduler_settings.idle_action == "off":
        return []
    now = now or utcnow()
    done = []
    with session_scope(store_settings) as sess:
        gpus: dict[uuid.UUID, list[tuple[uuid.UUID, int]]] = {}
        marks: dict[uuid.UUID, tuple] = {}
        for tid, host_id, index, *mark in sess.execute(
            select(Training.id, GPUAllocation.host_id, GPUAllocation.gpu_index, Training.idle_since,
                   Training.idle_warned_at, Training.reclaim_requested)
            .join(GPUAllocation, GPUAllocation.training_id == Training.id)
            # Sessions are watched by interactive.watch.
            .where(Training.status == "running", Training.kind.in_(names(lambda k: k.idle_reclaim)),
                   GPUAllocation.released_at.is_(None))):
            gpus.setdefault(tid, []).append((host_id, index))
            marks[tid] = tuple(mark)
        if not gpus:
            return []
        began = dict(sess.execute(
            select(TrainingEvent.training_id, func.max(TrainingEvent.time))
            .where(TrainingEvent.training_id.in_(list(gpus)), TrainingEvent.kind == "status",
                   TrainingEvent.status == "running").group_by(TrainingEvent.training_id)).all())
        readings = {}
        for tid, held in gpus.items():
            since = began.get(tid)
            if since is None:
                continue
            h = GPUMetricsHistory
            newest, last_busy, n_gpus = sess.execute(
                select(func.max(h.timestamp),
                       func.max(case((h.utilization >= scheduler_settings.idle_threshold_percent, h.timestamp))),
                       func.count(func.distinct(h.gpu_index)))
                .where(or_(*(and_(h.host_id == host_id, h.gpu_index == i) for host_id, i in held)),
                       h.timestamp >= since)).one()
            readings[tid] = (since, newest, last_busy, n_gpus == len(held))
    for tid, (since, newest, last_busy, every_gpu) in readings.items():
        if newest is None or not every_gpu or now - newest > fresh_after(telemetry_settings):
            continue
        if not _changes(scheduler_settings, marks[tid], since, newest, last_busy, now):
            continue  # the common case: no write (and no write lock on SQLite)
        what = _judge(scheduler_settings, store_settings, tid, since, newest, last_busy, now)
        if what:
            done.append((tid, what))
    return done


def _changes(settings: SchedulerSettings, mark: tuple, since: datetime, newest: datetime, last_busy: datetime | None,
             now: datetime) -> bool:
    idle_since, warned, reclaim = mark
    if last_busy is not None and last_busy >= newest:
        return idle_since is not None or warned is not None
    start = last_busy or since
    due = now - start >= timedelta(seconds=settings.idle_window_s)
    return (idle_since != start or (due and warned is None)
            or (settings.idle_action == "stop" and warned is not None and not reclaim))


def _judge(scheduler_settings: SchedulerSettings, store_settings: StoreSettings, tid: uuid.UUID, since: datetime,
           newest: datetime, last_busy: datetime | None, now: datetime) -> str | None:
    window = timedelta(seconds=scheduler_settings.idle_window_s)
    with write_session(store_settings) as sess:
        t = sess.execute(select(Training).where(Training.id == tid, Training.status == "running")
                         .execution_options(populate_existing=True)).scalar_one_or_none()
        if t is None:
            return None
        if last_busy is not None and last_busy >= newest:
            if t.idle_since is None and t.idle_warned_at is None:
                return None
            sess.execute(update(Training).where(Training.id == tid, Training.status == "running")
                         .values(idle_since=None, idle_warned_at=None).execution_options(synchronize_session=False))
            if t.idle_warned_at is not None and not t.reclaim_requested:
                record_event(sess, tid, "info", status="running", reason="its GPUs are busy again")
            return "busy"
        idle_since = last_busy or since
        values: dict = {} if t.idle_since == idle_since else {"idle_since": idle_since}
        what = None
        if now - idle_since >= window and t.idle_warned_at is None:
            values["idle_warned_at"] = now
            stop = scheduler_settings.idle_action == "stop"
            idle_for = int((now - idle_since).total_seconds())
            record_event(
                sess, tid, "warning", status="running",
                reason=f"its GPUs have been below {scheduler_settings.idle_threshold_percent:g}% utilisation for "
                       f"{idle_for}s (idle window {scheduler_settings.idle_window_s:g}s); "
                       + ("reclaiming them: the training is checkpointed and stopped" if stop
                          else "they are still held (idle_action: warn)"),
                data={"idle_since": idle_since.isoformat(),
                      "threshold_percent": scheduler_settings.idle_threshold_percent,
                      "action": scheduler_settings.idle_action})
            what = "warned"
        if scheduler_settings.idle_action == "stop" \
                and (t.idle_warned_at is not None or "idle_warned_at" in values) and not t.reclaim_requested:
            values["reclaim_requested"] = True
            what = "reclaim"
        if values:
            sess.execute(update(Training).where(Training.id == tid, Training.status == "running")
                         .values(**values).execution_options(synchronize_session=False))
        if what:
            log.warning("training %s: GPUs idle since %s -> %s", tid, idle_since, what)
        return what
