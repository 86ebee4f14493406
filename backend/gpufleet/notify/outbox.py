"""Deliveries from ``training_events`` and ``booking_events``: outboxes read after the fact, sent with retries.

Nothing that writes a training's or a booking's event knows of webhooks. :func:`fan_out`
reads each table's events past its ``notify_cursor`` row and records one ``webhook_deliveries``
row per (event, hook that wants it) — a unique pair, so reading an event twice
owes nothing twice — then moves the cursor, compare-and-set, so two servers
reading at once agree. The cursor never passes an event younger than
``LAG_S``: an event id handed out earlier can commit later (PostgreSQL
sequences), and such an event is still read on a later pass.

:func:`send_due` claims due deliveries (compare-and-set on ``next_at``, so a
delivery is sent by one server at a time), sends them, and records the
outcome: delivered on a 2xx; otherwise tried again after ``backoff * 2^(n-1)``
seconds (at most an hour), until ``GPUFLEET_WEBHOOK_MAX_ATTEMPTS``. Every try
of one delivery carries the same idempotency key: at least once, never lost
to a restart (the rows are the state).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpufleet.config import StoreSettings, WebhookSettings
from gpufleet.db.bookings import Booking, BookingEvent, BookingGPU
from gpufleet.db.models import Host, Training, TrainingEvent
from gpufleet.db.notify import NotifyCursor, Webhook, WebhookDelivery
from gpufleet.db.session import rows_changed, session_scope, write_session
from gpufleet.db.types import utcnow
from gpufleet.notify import messages, outbound
from gpufleet.notify.events import notification
from gpufleet.notify.hostnames import ascii_url

log = logging.getLogger(__name__)

CURSOR = "webhooks"
LAG_S = 10.0
BATCH = 500
MAX_BACKOFF_S = 3600.0


@dataclass(frozen=True)
class Outbox:
    """A table of events read for webhooks: its cursor's name, the delivery column that names its rows, and
    how a batch past the cursor is read as ``(id, time, notification or None, owner)``."""

    cursor: str
    table: Any  # TrainingEvent | BookingEvent: has ``id`` and ``time``
    column: Any  # WebhookDelivery.event_id | WebhookDelivery.booking_event_id
    read: Callable[[Session, int], Sequence[tuple[int, datetime, str | None, str]]]


def _trainings(sess: Session, start: int) -> list[tuple[int, datetime, str | None, str]]:
    rows = sess.execute(
        select(TrainingEvent.id, TrainingEvent.time, TrainingEvent.kind, TrainingEvent.status, Training.owner,
               Training.kind)
        .join(Training, Training.id == TrainingEvent.training_id)
        .where(TrainingEvent.id > start).order_by(TrainingEvent.id).limit(BATCH)).all()
    return [(eid, when, notification(kind, status, tkind), owner) for eid, when, kind, status, owner, tkind in rows]


def _bookings(sess: Session, start: int) -> list[tuple[int, datetime, str | None, str]]:
    rows = sess.execute(select(BookingEvent.id, BookingEvent.time, BookingEvent.kind, BookingEvent.owner)
                        .where(BookingEvent.id > start).order_by(BookingEvent.id).limit(BATCH)).all()
    return [(eid, when, kind, owner) for eid, when, kind, owner in rows]


OUTBOXES = (
    Outbox(CURSOR, TrainingEvent, WebhookDelivery.event_id, _trainings),
    Outbox("webhooks-bookings", BookingEvent, WebhookDelivery.booking_event_id, _bookings),
)


def fan_out(settings: StoreSettings) -> int:
    """Record the deliveries owed for events past the cursors; how many were new."""
    return sum(_fan_out(settings, box) for box in OUTBOXES)


def _fan_out(settings: StoreSettings, box: Outbox) -> int:
    if not _has_news(settings, box):
        return 0  # most passes: no write transaction (SQLite's one write lock stays free)
    with write_session(settings) as sess:
        first_hook = sess.execute(select(func.min(Webhook.created_at))).scalar()
        if first_hook is None:
            return 0  # no hook anywhere: nothing to read for
        cursor = sess.get(NotifyCursor, box.cursor)
        if cursor is None:
            # Start just before the first hook: older events were owed to nobody.
            start = sess.execute(select(func.max(box.table.id)).where(
                box.table.time < first_hook - timedelta(seconds=LAG_S))).scalar() or 0
            cursor = NotifyCursor(name=box.cursor, last_event_id=start)
            sess.add(cursor)
            try:
                sess.flush()
            except IntegrityError:
                return 0  # another server made it; the next pass reads
        start = cursor.last_event_id
        rows = box.read(sess, start)
        made = _record(sess, box, rows)
        settled = utcnow() - timedelta(seconds=LAG_S)
        end = start
        for eid, when, _name, _owner in rows:
            if when >= settled:
                break
            end = eid
        if end != start:
            sess.execute(update(NotifyCursor).where(NotifyCursor.name == box.cursor,
                                                    NotifyCursor.last_event_id == start)
                         .values(last_event_id=end).execution_options(synchronize_session=False))
        return made


def _has_news(settings: StoreSettings, box: Outbox) -> bool:
    """Whether a hook exists and an event came past the cursor (or there is no cursor yet)."""
    with session_scope(settings) as sess:
        if sess.execute(select(Webhook.id).limit(1)).first() is None:
            return False
        cursor = sess.get(NotifyCursor, box.cursor)
        return cursor is None or sess.execute(
            select(box.table.id).where(box.table.id > cursor.last_event_id).limit(1)).first() is not None


def _record(sess: Session, box: Outbox, rows: Sequence[tuple[int, datetime, str | None, str]]) -> int:
    wanted = [(eid, name, when, owner) for eid, when, name, owner in rows if name is not None]
    if not wanted:
        return 0
    hooks = sess.execute(select(Webhook).where(Webhook.owner.in_({w[3] for w in wanted}),
                                               Webhook.enabled.is_(True))).scalars().all()
    have = set(sess.execute(select(WebhookDelivery.webhook_id, box.column).where(
        box.column.in_([w[0] for w in wanted]))).all())
    made = 0
    for eid, name, when, owner in wanted:
        for hook in hooks:
            if hook.owner == owner and name in hook.events and when >= hook.created_at and (hook.id, eid) not in have:
                sess.add(WebhookDelivery(webhook_id=hook.id, event=name, next_at=utcnow(), **{box.column.key: eid}))
                made += 1
    sess.flush()
    return made


def _claim(store_settings: StoreSettings, webhook_settings: WebhookSettings, limit: int) -> dict[object, list[int]]:
    """Due deliveries taken by this server, per webhook, oldest first."""
    now = utcnow()
    hold = now + timedelta(seconds=webhook_settings.webhook_timeout_s * 2 + 5)  # past this try, if this server dies
    with session_scope(store_settings) as sess:
        due = sess.execute(select(WebhookDelivery.id, WebhookDelivery.next_at, WebhookDelivery.webhook_id).where(
            WebhookDelivery.delivered_at.is_(None), WebhookDelivery.gave_up_at.is_(None),
            WebhookDelivery.next_at <= now).order_by(WebhookDelivery.id).limit(limit)).all()
    if not due:
        return {}
    claimed: dict[object, list[int]] = {}
    with write_session(store_settings) as sess:
        for did, next_at, hook_id in due:
            r = sess.execute(update(WebhookDelivery)
                             .where(WebhookDelivery.id == did, WebhookDelivery.next_at == next_at)
                             .values(next_at=hold, attempts=WebhookDelivery.attempts + 1)
                             .execution_options(synchronize_session=False))
            if rows_changed(r):
                claimed.setdefault(hook_id, []).append(did)
    return claimed


def notice_for(sess: Session, d: WebhookDelivery) -> messages.Notice:
    if d.booking_event_id is not None:
        return _booking_notice(sess, d)
    ev = sess.get(TrainingEvent, d.event_id)
    t = sess.get(Training, ev.training_id) if ev is not None else None
    training = {"id": str(t.id), "name": t.name, "owner": t.owner, "kind": t.kind,
                "status": ev.status if ev else None} if t is not None else {}
    return messages.Notice(key=f"{d.webhook_id}:{d.event_id}", event=d.event,
                           time=ev.time.isoformat() if ev else utcnow().isoformat(), training=training,
                           reason=ev.reason if ev else None, user=ev.user if ev else None,
                           data=ev.data if ev else None)


def _booking_notice(sess: Session, d: WebhookDelivery) -> messages.Notice:
    ev = sess.get(BookingEvent, d.booking_event_id)
    b = sess.get(Booking, ev.booking_id) if ev is not None else None
    booking: dict[str, Any] = {}
    if b is not None:
        gpus = sess.execute(select(Host.name, BookingGPU.gpu_index).join(Host, Host.id == BookingGPU.host_id)
                            .where(BookingGPU.booking_id == b.id).order_by(Host.name, BookingGPU.gpu_index)).all()
        booking = {"id": str(b.id), "owner": b.owner, "kind": b.kind, "start": b.start_at.isoformat(),
                   "end": b.end_at.isoformat(), "time_zone": b.time_zone, "gpu_count": b.gpu_count,
                   "gpus": [{"host": host, "index": index} for host, index in gpus], "reason": b.reason,
                   "released_at": b.released_at.isoformat() if b.released_at else None}
    return messages.Notice(key=f"{d.webhook_id}:b{d.booking_event_id}", event=d.event,
                           time=ev.time.isoformat() if ev else utcnow().isoformat(), training={},
                           reason=ev.reason if ev else None, user=ev.user if ev else None, booking=booking)


def post(http: httpx.Client, hook: Webhook, notice: messages.Notice) -> tuple[bool, str | None]:
    """Send one notice; whether it was taken (2xx), and what went wrong otherwise.

    What went wrong is said in the server's words: the status code, never the
    answer's body (a receiver inside the network must not be read through a
    webhook), and for a failed connection whether the address was refused,
    the time ran out or no connection was made.
    """
    raw = messages.body(notice, hook.format)
    try:
        url = ascii_url(hook.url)  # as it was judged at registration (a hook stored before that was not)
        # Streamed: the answer's body is never read, only its status line.
        with http.stream("POST", url, content=raw, headers=messages.headers(notice, hook.secret, raw)) as r:
            status = r.status_code
    except httpx.HTTPError as exc:
        return False, failure(exc)
    except (ValueError, httpx.InvalidURL) as exc:  # BadHost among them
        return False, f"this webhook's URL cannot be sent to: {str(exc)[:300]}; change it (PATCH its url)"
    if 200 <= status < 300:
        return True, None
    return False, f"HTTP {status}"


def failure(exc: httpx.HTTPError) -> str:
    """Why a request was not answered, in words that tell nothing of what listens inside the network."""
    refusal = outbound.refused(exc)
    if refusal is not None:
        return str(refusal)
    if isinstance(exc, httpx.TimeoutException):
        return "the receiver did not answer in time (GPUFLEET_WEBHOOK_TIMEOUT_S)"
    if isinstance(exc, httpx.ConnectError) and "cannot resolve" in str(exc):
        return str(exc)[:300]
    if isinstance(exc, (httpx.ConnectError, httpx.NetworkError, httpx.RemoteProtocolError)):
        return "no answer: the connection to the receiver failed"
    return f"the request failed ({type(exc).__name__})"


def _send_one(store_settings: StoreSettings, webhook_settings: WebhookSettings, http: httpx.Client, did: int) -> bool:
    with session_scope(store_settings) as sess:
        d = sess.get(WebhookDelivery, did)
        hook = sess.get(Webhook, d.webhook_id) if d is not None else None
        if d is None or hook is None:
            return False
        notice = notice_for(sess, d)
        attempts = d.attempts
        sess.expunge(hook)
    ok, error = post(http, hook, notice) if hook.enabled else (False, "the webhook is disabled")
    _record_try(store_settings, webhook_settings, did, ok, error, attempts)
    return ok


def _record_try(store_settings: StoreSettings, webhook_settings: WebhookSettings, did: int, ok: bool,
                error: str | None, attempts: int) -> None:
    now = utcnow()
    values: dict[str, object] = {"last_error": error}
    if ok:
        values["delivered_at"] = now
    elif attempts >= webhook_settings.webhook_max_attempts:
        values["gave_up_at"] = now
        log.warning("webhook delivery %d failed %d times; giving up: %s", did, attempts, error)
    else:
        values["next_at"] = now + timedelta(seconds=backoff_s(webhook_settings, attempts))
    with write_session(store_settings) as sess:
        sess.execute(update(WebhookDelivery).where(WebhookDelivery.id == did).values(**values)
                     .execution_options(synchronize_session=False))


def backoff_s(settings: WebhookSettings, attempts: int) -> float:
    return min(settings.webhook_backoff_s * 2 ** max(0, attempts - 1), MAX_BACKOFF_S)


def send_due(store_settings: StoreSettings, webhook_settings: WebhookSettings, http: httpx.Client,
             pool: ThreadPoolExecutor, limit: int = 16) -> int:
    """Send what is due now; how many were delivered.

    Webhooks are served side by side, each one's deliveries one after another
    in the order of their events, so a receiver sees a training start before it ends
    (a retried delivery comes after the ones sent meanwhile).
    """
    claimed = _claim(store_settings, webhook_settings, limit)
    return sum(pool.map(lambda ids: sum(_send_one(store_settings, webhook_settings, http, did) for did in ids),
                        claimed.values()))

