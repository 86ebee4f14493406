"""The scheduling and recovery loop that the API process runs.

In a fleet several API processes may run; only the one holding a PostgreSQL
advisory lock leads, so the queue is worked by one loop at a time (the
reservation would stay correct without it; the lock only saves wasted work).
A create request calls :func:`wake` so a new training does not wait for the
next tick.
"""

from __future__ import annotations

import logging
import threading
import uuid

from sqlalchemy import Connection, text

from gpufleet.config import Settings
from gpufleet.db.session import engine_for
from gpufleet.jobs.celery_app import send_training
from gpufleet.jobs.recovery import note_unsent, recover_expired, resend_stale, resend_unsent
from gpufleet.scheduling.scheduler import PassResult, schedule_pending

log = logging.getLogger(__name__)

TICK_S = 0.5
# "gpufleet" in ASCII: the key every gpufleet API process contends for.
ADVISORY_KEY = 0x67707566_6C656574 & 0x7FFFFFFFFFFFFFFF

_WAKE = threading.Event()


def wake() -> None:
    """Run a pass now instead of at the next tick (in this process's loop)."""
    _WAKE.set()


def tick(settings: Settings) -> PassResult:
    """One round: the queue, then expired leases and unclaimed tasks."""

    def send(tid: uuid.UUID, host: str) -> None:
        send_training(settings, tid, host)

    def send_or_remember(tid: uuid.UUID, host: str) -> None:
        try:
            send_training(settings, tid, host)
        except Exception:
            note_unsent(tid, host)  # sent again at every tick until the broker is back
            raise

    # What waited for the broker goes first: it was placed before anything new.
    resend_unsent(settings, send)
    # The queue next: a woken pass is usually a new training someone waits for.
    result = schedule_pending(settings, send_or_remember)
    recover_expired(settings)
    resend_stale(settings, send)
    return result


class Leader:
    """Holds the advisory lock on its own connection (PostgreSQL); SQLite always leads."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._conn: Connection | None = None

    def acquire(self) -> bool:
        if self.settings.is_sqlite:
            return True
        try:
            if self._conn is None:
                conn = engine_for(self.settings).connect()
                got = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": ADVISORY_KEY}).scalar()
                conn.commit()
                if not got:
                    conn.close()
                    return False
                self._conn = conn
            else:
                # A lock lives as long as its connection; prove it still does.
                self._conn.execute(text("SELECT 1"))
                self._conn.commit()
            return True
        except Exception:  # noqa: BLE001 - lost connection: let another process lead
            log.warning("scheduler leadership lost", exc_info=True)
            self.release()
            return False

    def release(self) -> None:
        if self._conn is not None:
            try:
                # Invalidate rather than close: a session-level advisory lock
                # would survive a connection returned to the pool.
                self._conn.invalidate()
                self._conn.close()
            except Exception:  # noqa: BLE001
                pass
            self._conn = None


def _run(settings: Settings, stop: threading.Event) -> None:
    leader = Leader(settings)
    try:
        while not stop.is_set():
            if leader.acquire():
                try:
                    tick(settings)
                except Exception:  # noqa: BLE001 - one bad round must not end scheduling
                    log.exception("scheduler tick failed")
            _WAKE.wait(TICK_S)
            _WAKE.clear()
    finally:
        leader.release()


def start(settings: Settings, stop_event: threading.Event) -> threading.Thread:
    t = threading.Thread(target=_run, args=(settings, stop_event), name="gpufleet-scheduler", daemon=True)
    t.start()
    return t
