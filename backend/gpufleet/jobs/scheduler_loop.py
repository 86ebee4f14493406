"""The scheduling and recovery loop that the API process runs.

In a fleet several API processes may run; only the one holding a PostgreSQL
advisory lock leads, so the queue is worked by one loop at a time (the
reservation would stay correct without it; the lock only saves wasted work).
A create request calls :func:`wake` so a new training does not wait for the
next tick; with Redis, a wake in a process that does not lead reaches the
leader through the event bus.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

from sqlalchemy import Connection, text

from gpufleet.config import Settings, StoreSettings
from gpufleet.db.session import engine_for
from gpufleet.jobs.celery_app import send_training
from gpufleet.jobs.reach import Reach
from gpufleet.jobs.recovery import note_unsent, recover_expired, resend_stale, resend_unsent
from gpufleet.scheduling import idle
from gpufleet.interactive import watch as session_watch
from gpufleet.scheduling.scheduler import PassResult, schedule_pending
from gpufleet.sweeps import driver as sweeps

log = logging.getLogger(__name__)

TICK_S = 0.5
# "gpufleet" in ASCII: the key every gpufleet API process contends for.
ADVISORY_KEY = 0x67707566_6C656574 & 0x7FFFFFFFFFFFFFFF

WAKE_TOPIC = "scheduler.wake"

_WAKE = threading.Event()
# Set while this process's loop holds the lock; when it does not, a wake is relayed through Redis
# by a thread of its own (_RELAY), so a request never waits on Redis.
_LEADING = threading.Event()
_RELAY = threading.Event()
_RELAYING = threading.Event()


def wake() -> None:
    """Run a pass now instead of at the next tick: in this process's loop, or the leader's in another."""
    _WAKE.set()
    if _RELAYING.is_set() and not _LEADING.is_set():
        _RELAY.set()


def _relay_wakes(settings: StoreSettings, stop: threading.Event) -> Callable[[], None]:
    """Hear wakes from other processes (when leading) and send this one's (when not), through Redis."""
    if not settings.redis_url:
        return lambda: None
    from gpufleet.events import get_bus

    bus = get_bus(settings)

    def relay() -> None:
        while not stop.is_set():
            if _RELAY.wait(1.0):
                _RELAY.clear()
                bus.publish(WAKE_TOPIC, {})

    threading.Thread(target=relay, name="gpufleet-wake-relay", daemon=True).start()
    _RELAYING.set()
    unsubscribe = bus.subscribe(WAKE_TOPIC, lambda _topic, _msg: _WAKE.set() if _LEADING.is_set() else None)

    def stop_relaying() -> None:
        _RELAYING.clear()
        unsubscribe()

    return stop_relaying


def tick(settings: Settings, reach: Reach | None = None) -> PassResult:
    """One round: the queue, then expired leases (judged over the time ``reach`` says the database could be
    reached: gpufleet.jobs.reach), unclaimed tasks and idle GPUs."""

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
    # Sweeps queue their next trials (and settle ended ones) before the pass places them.
    sweeps.advance_all(settings)
    # The queue next: a woken pass is usually a new training someone waits for.
    result = schedule_pending(settings, send_or_remember)
    recover_expired(settings, settings, reach)
    resend_stale(settings, settings, send)
    idle.watch_due(settings)
    session_watch.watch_due(settings, settings, settings)
    return result


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class Outage:
    """Logs a failing state once when it starts and once when it ends (with its duration).

    The loop retries every tick; logging each retry (with a traceback) filled
    hundreds of kilobytes a minute during a database outage.
    """

    def __init__(self, what: str, *, trace: bool = False):
        self.what = what
        self.trace = trace  # the first failure's traceback: a bug shows where it is
        self.since: float | None = None

    def failed(self, exc: BaseException) -> None:
        if self.since is None:
            self.since = time.monotonic()
            log.warning("%s: %s (retrying every %.1fs; logged again when it recovers)",
                        self.what, _first_line(exc), TICK_S, exc_info=self.trace or log.isEnabledFor(logging.DEBUG))
        else:
            log.debug("%s still: %s", self.what, _first_line(exc))

    def ok(self, recovered: str) -> None:
        if self.since is not None:
            log.warning("%s after %.1fs", recovered, time.monotonic() - self.since)
            self.since = None


class Leader:
    """Holds the advisory lock on its own connection (PostgreSQL); SQLite always leads."""

    def __init__(self, settings: StoreSettings):
        self.settings = settings
        self._conn: Connection | None = None
        self.outage = Outage("scheduler leadership lost")

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
            self.outage.ok("scheduler leadership regained")
            return True
        except Exception as exc:  # noqa: BLE001 - lost connection: let another process lead
            self.outage.failed(exc)
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
    ticks = Outage("scheduler ticks fail", trace=True)
    reach = Reach()  # until its first pass, this process vouches for no time at all
    unsubscribe = _relay_wakes(settings, stop)
    try:
        while not stop.is_set():
            if leader.acquire():
                _LEADING.set()
                try:
                    tick(settings, reach)
                    ticks.ok("scheduler ticks work again")
                except Exception as exc:  # noqa: BLE001 - one bad round must not end scheduling
                    reach.failed()
                    ticks.failed(exc)
            else:
                reach.failed()  # another process judges the leases, or none can reach the database
                _LEADING.clear()
            _WAKE.wait(TICK_S)
            _WAKE.clear()
    finally:
        _LEADING.clear()
        unsubscribe()
        leader.release()


def start(settings: Settings, stop_event: threading.Event) -> threading.Thread:
    t = threading.Thread(target=_run, args=(settings, stop_event), name="gpufleet-scheduler", daemon=True)
    t.start()
    return t
