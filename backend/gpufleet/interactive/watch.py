"""The sessions' clock: hard time limits, idle release, and the one ``session_stopped`` event.

The scheduler loop calls :func:`watch_due` every few seconds. For each
running session:

- past ``started_at + hours`` it is stopped (``end_reason`` ``time_limit``);
- it is idle when every one of its GPUs has stayed below
  ``session_idle_threshold_percent`` (the telemetry history) and, for a
  notebook, no kernel was busy and no client connected or made a request
  (``active_at``, reported by its launcher) for ``session_idle_window_s``:
  then a ``session_idle_warning`` event; still idle ``session_idle_grace_s``
  later (action ``stop``) it is stopped (``end_reason`` ``idle``). Any
  activity in between withdraws the warning.

A stop is a cancel of the row: its supervisor ends the process group and the
reservation ends with it. Once a session has ended, however it ended, it gets
one ``session_stopped`` event. Without fresh GPU samples nothing is judged idle.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime, timedelta

from sqlalchemy import and_, case, func, or_, select, update
from sqlalchemy.orm import Session

from gpufleet.config import SessionSettings, StoreSettings, TelemetrySettings
from gpufleet.db.interactive import TrainingSession
from gpufleet.db.models import GPUAllocation, GPUMetricsHistory
from gpufleet.db.session import rows_changed, session_scope, write_session
from gpufleet.db.types import utcnow
from gpufleet.scheduling.idle import fresh_after
from gpufleet.interactive.ended import record_ends
from gpufleet.lifecycle.transitions import record_event
from gpufleet.lifecycle.models import Training

log = logging.getLogger(__name__)

CHECK_EVERY_S = 2.0
_last_check: dict[str, float] = {}


def watch_due(store_settings: StoreSettings, session_settings: SessionSettings,
              telemetry_settings: TelemetrySettings) -> None:
    """:func:`watch`, at most every ``CHECK_EVERY_S`` per database."""
    key = store_settings.effective_database_url
    if time.monotonic() - _last_check.get(key, 0.0) < CHECK_EVERY_S:
        return
    _last_check[key] = time.monotonic()
    watch(store_settings, session_settings, telemetry_settings)


def watch(store_settings: StoreSettings, session_settings: SessionSettings, telemetry_settings: TelemetrySettings,
          now: datetime | None = None) -> None:
    now = now or utcnow()
    with session_scope(store_settings) as sess:
        running = sess.execute(
            select(Training.id, Training.started_at, TrainingSession)
            .join(TrainingSession, TrainingSession.training_id == Training.id)
            .where(Training.status == "running", Training.cancel_requested.is_(False),
                   TrainingSession.stop_reason.is_(None))).all()
        readings = {tid: _gpu_reading(sess, tid, started, session_settings.session_idle_threshold_percent)
                    for tid, started, _ in running if started}
    for tid, started, side in running:
        if started is None:
            continue
        if now >= started + timedelta(hours=side.hours):
            _stop(store_settings, tid, "time_limit", f"its time limit of {side.hours:g}h was reached; stopping it "
                                               "and releasing its GPUs (`gpufleet session extend` adds time)")
        elif session_settings.session_idle_action != "off" and side.ready_at is not None:
            _judge_idle(store_settings, session_settings, telemetry_settings, tid, started, side, readings.get(tid),
                        now)
    record_ends(store_settings)


def _gpu_reading(sess: Session, tid: uuid.UUID, since: datetime, threshold: float) -> tuple | None:
    """(newest sample, newest busy sample) over the session's GPUs since it started; None without every GPU."""
    held = sess.execute(select(GPUAllocation.host_id, GPUAllocation.gpu_index)
                        .where(GPUAllocation.training_id == tid, GPUAllocation.released_at.is_(None))).all()
    if not held:
        return None
    h = GPUMetricsHistory
    newest, last_busy, n = sess.execute(
        select(func.max(h.timestamp), func.max(case((h.utilization >= threshold, h.timestamp))),
               func.count(func.distinct(h.gpu_index)))
        .where(or_(*(and_(h.host_id == host, h.gpu_index == i) for host, i in held)), h.timestamp >= since)).one()
    return (newest, last_busy) if newest is not None and n == len(held) else None


def _judge_idle(store_settings: StoreSettings, settings: SessionSettings, telemetry_settings: TelemetrySettings,
                tid: uuid.UUID, started: datetime, side: TrainingSession, reading: tuple | None, now: datetime) -> None:
    if reading is None or now - reading[0] > fresh_after(telemetry_settings):
        return  # no fresh samples of every GPU: never idle for lack of data
    newest, last_busy = reading
    if last_busy is not None and last_busy >= newest:
        quiet_since = now  # busy right now
    else:
        quiet_since = max(x for x in (last_busy, started, side.ready_at, side.active_at) if x is not None)
    window = timedelta(seconds=settings.session_idle_window_s)
    if now - quiet_since < window:
        if side.idle_warned_at is not None:
            _withdraw(store_settings, tid)
        return
    if side.idle_warned_at is None:
        _warn(store_settings, settings, tid, quiet_since, now)
    elif settings.session_idle_action == "stop" and \
            now - side.idle_warned_at >= timedelta(seconds=settings.session_idle_grace_s):
        _stop(store_settings, tid, "idle", f"idle since {quiet_since.isoformat(timespec='seconds')} and through the "
                                     f"{settings.session_idle_grace_s:g}s grace after the warning; stopping it "
                                     "and releasing its GPUs")


def _warn(store_settings: StoreSettings, settings: SessionSettings, tid: uuid.UUID, idle_since: datetime,
          now: datetime) -> None:
    grace = settings.session_idle_grace_s
    stop_at = now + timedelta(seconds=grace) if settings.session_idle_action == "stop" else None
    with write_session(store_settings) as sess:
        done = sess.execute(update(TrainingSession)
                            .where(TrainingSession.training_id == tid, TrainingSession.idle_warned_at.is_(None))
                            .values(idle_warned_at=now).execution_options(synchronize_session=False))
        if not rows_changed(done):
            return
        sess.execute(update(Training).where(Training.id == tid).values(idle_since=idle_since)
                     .execution_options(synchronize_session=False))
        then = (f"it will be stopped at {stop_at.isoformat(timespec='seconds')} unless it is used" if stop_at
                else "its GPUs stay held (GPUFLEET_SESSION_IDLE_ACTION=warn)")
        record_event(sess, tid, "session_idle_warning", status="running",
                     reason=f"idle: GPUs below {settings.session_idle_threshold_percent:g}% utilisation and no "
                            f"notebook activity for {settings.session_idle_window_s:g}s; {then}",
                     data={"idle_since": idle_since.isoformat(), "stop_at": stop_at.isoformat() if stop_at else None,
                           "grace_s": grace, "threshold_percent": settings.session_idle_threshold_percent})
    log.warning("session %s: idle since %s, warned", tid, idle_since)


def _withdraw(settings: StoreSettings, tid: uuid.UUID) -> None:
    with write_session(settings) as sess:
        done = sess.execute(update(TrainingSession)
                            .where(TrainingSession.training_id == tid, TrainingSession.idle_warned_at.is_not(None))
                            .values(idle_warned_at=None).execution_options(synchronize_session=False))
        if rows_changed(done):
            sess.execute(update(Training).where(Training.id == tid).values(idle_since=None)
                         .execution_options(synchronize_session=False))
            record_event(sess, tid, "info", status="running", reason="the session is in use again; idle warning "
                                                                    "withdrawn")


def _stop(settings: StoreSettings, tid: uuid.UUID, why: str, text: str) -> None:
    with write_session(settings) as sess:
        done = sess.execute(update(TrainingSession)
                            .where(TrainingSession.training_id == tid, TrainingSession.stop_reason.is_(None))
                            .values(stop_reason=why).execution_options(synchronize_session=False))
        if not rows_changed(done):
            return
        sess.execute(update(Training).where(Training.id == tid, Training.status == "running")
                     .values(cancel_requested=True).execution_options(synchronize_session=False))
        record_event(sess, tid, "cancel", status="running", reason=text, data={"reason": why})
    log.warning("session %s: %s", tid, text)
