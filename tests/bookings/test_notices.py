"""A booker is told: once when her booking starts soon, once when it is released (cancelled or unused), as
``booking_events`` the webhooks' outbox reads. On both databases; the last test sends them through the real
sending thread to a real receiver, the hook and the booking made through the API as a member makes them."""

from __future__ import annotations

import json
import threading
import uuid
from datetime import datetime, timedelta, timezone

from fastapi.testclient import TestClient
from sqlalchemy import select
from support.fleet import wait_for
from support.people import bearer
from support.receiver import Receiver, signed

from gpufleet.api.app import create_app
from gpufleet.bookings import service
from gpufleet.config import Settings
from gpufleet.db.bookings import RELEASED, STARTING, BookingEvent
from gpufleet.db.notify import Webhook, WebhookDelivery
from gpufleet.db.session import session_scope, write_session
from gpufleet.db.types import utcnow
from gpufleet.jobs import notify_loop
from gpufleet.notify import outbox
from gpufleet.scheduling.scheduler import schedule_pending
from gpufleet.users.accounts import add_user

ADMIN = service.Actor("root-admin", admin=True)
BOOKING_EVENTS = ["booking_starting", "booking_released"]


def _minute(t: datetime) -> datetime:
    return t.replace(second=0, microsecond=0) + timedelta(minutes=1)


def _book(s: Settings, owner: str, start: datetime, hours: float = 2, tz: str = "UTC"):
    with write_session(s) as sess:
        add_user(sess, owner, "member")
        return service.create(sess, ADMIN, service.Wanted(start, start + timedelta(hours=hours), 2, host="h1",
                                                          owner=owner, time_zone=tz), s, utcnow())


def _hook(s: Settings, owner: str, events: list[str]) -> uuid.UUID:
    with write_session(s) as sess:
        hook = Webhook(owner=owner, url="https://hooks.example.com/x", format="json", events=events,
                       secret="whsec_test", created_at=utcnow() - timedelta(hours=1))
        sess.add(hook)
        sess.flush()
        return hook.id


def _told(s: Settings, booking_id: uuid.UUID) -> list[tuple[str, str | None]]:
    with session_scope(s) as sess:
        return [(e.kind, e.user) for e in sess.scalars(select(BookingEvent).where(
            BookingEvent.booking_id == booking_id).order_by(BookingEvent.id))]


def test_the_booker_is_told_once_ahead_of_the_start_and_once_when_released_unused(db_settings, add_host) -> None:
    s = db_settings.model_copy(update={"booking_notice_lead_s": 900.0, "booking_release_grace_s": 600.0})
    add_host("h1", 4)
    begins = _minute(utcnow()) + timedelta(hours=1)
    b = _book(s, "dana", begins, tz="Europe/Berlin")
    schedule_pending(s, clock=lambda: begins - timedelta(minutes=16))
    assert _told(s, b.id) == []  # more than the lead ahead: nothing yet
    for minutes in (14, 10, 5):  # every pass within the lead (two servers' passes alike): told once
        schedule_pending(s, clock=lambda m=minutes: begins - timedelta(minutes=m))
    assert _told(s, b.id) == [(STARTING, None)]
    with session_scope(s) as sess:
        said = sess.scalar(select(BookingEvent.reason).where(BookingEvent.booking_id == b.id))
    local = begins.astimezone(timezone(timedelta(hours=1)))  # Berlin in December
    assert f"2 GPUs starts at {local:%Y-%m-%d %H:%M} Europe/Berlin ({begins:%H:%M} UTC)" in said, said
    assert "in its first 10 min, the rest is released" in said, said
    schedule_pending(s, clock=lambda: begins + timedelta(minutes=11))  # nothing of hers ran in the grace
    assert _told(s, b.id) == [(STARTING, None), (RELEASED, None)]
    schedule_pending(s, clock=lambda: begins + timedelta(minutes=12))
    assert len(_told(s, b.id)) == 2


def test_a_booking_cancelled_before_it_starts_tells_who_cancelled_it_and_never_that_it_starts(db_settings,
                                                                                             add_host) -> None:
    add_host("h1", 4)
    begins = _minute(utcnow()) + timedelta(hours=1)
    b = _book(db_settings, "dana", begins)
    with write_session(db_settings) as sess:
        service.cancel(sess, ADMIN, b.id, utcnow())
    schedule_pending(db_settings, clock=lambda: begins - timedelta(minutes=5))
    assert _told(db_settings, b.id) == [(RELEASED, "root-admin")]
    maintenance = begins + timedelta(hours=3)
    with write_session(db_settings) as sess:  # a maintenance window is nobody's booking to be told of
        m = service.create(sess, ADMIN, service.Wanted(maintenance, maintenance + timedelta(hours=1), 4, host="h1",
                                                       kind="maintenance"), db_settings, utcnow())
    schedule_pending(db_settings, clock=lambda: maintenance - timedelta(minutes=1))
    assert _told(db_settings, m.id) == []


def test_a_bookings_events_are_owed_to_its_owners_hooks_that_chose_them_only(db_settings, add_host) -> None:
    add_host("h1", 4)
    wants = _hook(db_settings, "dana", BOOKING_EVENTS)
    only_released = _hook(db_settings, "dana", ["booking_released"])
    trainings_only = _hook(db_settings, "dana", ["training_failed"])
    erins = _hook(db_settings, "erin", BOOKING_EVENTS)
    begins = _minute(utcnow()) + timedelta(minutes=5)
    b = _book(db_settings, "dana", begins)
    _book(db_settings, "erin", begins + timedelta(hours=5))  # hers starts later: nothing for her yet
    schedule_pending(db_settings)  # the real clock: dana's starts within the lead
    with write_session(db_settings) as sess:
        service.cancel(sess, service.Actor("dana", admin=False), b.id, utcnow())
    assert outbox.fan_out(db_settings) == 3
    assert outbox.fan_out(db_settings) == 0  # read again: nothing owed twice
    with session_scope(db_settings) as sess:
        owed = {(d.webhook_id, d.event) for d in sess.scalars(select(WebhookDelivery))}
        assert owed == {(wants, STARTING), (wants, RELEASED), (only_released, RELEASED)}
        assert not {trainings_only, erins} & {h for h, _ in owed}
        d = sess.scalar(select(WebhookDelivery).where(WebhookDelivery.webhook_id == wants,
                                                      WebhookDelivery.event == RELEASED))
        notice = outbox.notice_for(sess, d)
    body = notice.as_json()
    assert body["booking"]["id"] == str(b.id) and body["booking"]["owner"] == "dana"
    assert body["booking"]["gpus"] == [{"host": "h1", "index": 0}, {"host": "h1", "index": 1}]
    assert body["reason"] == "cancelled by dana" and body["user"] == "dana" and body["training"] == {}
    assert notice.as_text() == f"gpufleet: booking {str(b.id)[:8]} of dana was released: cancelled by dana"
    assert notice.key == f"{wants}:b{d.booking_event_id}"


def test_booking_notices_reach_a_real_receiver_signed(on_settings, people, add_host) -> None:
    s = on_settings.model_copy(update={"webhook_allowed_networks": ["127.0.0.1/32"], "webhook_backoff_s": 0.2})
    add_host("h1", 4)
    receiver = Receiver()
    stop = threading.Event()
    alice = people.names["alice"]
    try:
        with TestClient(create_app(s)) as c:
            r = c.post("/api/v1/webhooks", headers=bearer(people.alice), json={"url": receiver.url,
                                                                                "events": BOOKING_EVENTS})
            assert r.status_code == 201, r.text
            secret = r.json()["secret"]
            begins = _minute(datetime.now(timezone.utc)) + timedelta(minutes=3)
            r = c.post("/api/v1/bookings", headers=bearer(people.alice), json={
                "start": begins.isoformat(timespec="minutes"), "hours": 1, "gpus": 2, "host": "h1"})
            assert r.status_code == 201, r.text
            booking = r.json()["id"]
            schedule_pending(s)  # the scheduler's pass: it starts within the lead
            gone = c.delete(f"/api/v1/bookings/{booking}", headers=bearer(people.admin))
            assert gone.status_code == 200, gone.text
        loop = notify_loop.start(s, s, stop, poll_s=0.1)
        wait_for(lambda: len(receiver.got) >= 2, 120, "the booking's two notifications at the receiver")
        assert receiver.events() == BOOKING_EVENTS  # in the order they happened
        for headers, raw in receiver.got:
            assert signed(secret, headers, raw), headers
            body = json.loads(raw)
            assert body["booking"]["id"] == booking and body["booking"]["owner"] == alice
        released = json.loads(receiver.got[1][1])
        assert released["reason"] == f"cancelled by {people.names['admin']}"
        assert released["booking"]["released_at"] is not None
    finally:
        stop.set()
        receiver.close()
    loop.join(30)
