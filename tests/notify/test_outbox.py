"""The outbox's rules (notify/outbox.py), on both databases: which hooks an event is owed to, that
reading it again owes nothing twice, and where the cursor stops."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from gpufleet.config import Settings
from gpufleet.db.models import TrainingEvent
from gpufleet.db.notify import NotifyCursor, Webhook, WebhookDelivery
from gpufleet.db.session import session_scope
from gpufleet.db.types import utcnow
from gpufleet.lifecycle.models import new_training
from gpufleet.notify import outbox

HOUR = timedelta(hours=1)


def _hook(sess, owner: str, events: list[str], *, enabled: bool = True, made=None) -> uuid.UUID:
    hook = Webhook(owner=owner, url="https://hooks.example.com/x", format="json", events=events,
                   secret="whsec_test", enabled=enabled, created_at=made or utcnow() - 2 * HOUR)
    sess.add(hook)
    sess.flush()
    return hook.id


def _training(sess, owner: str, kind: str = "recipe") -> uuid.UUID:
    t = new_training(kind=kind, recipe="mlp" if kind != "session" else "session", owner=owner,
                     name=f"t-{uuid.uuid4().hex[:6]}", world_size=1, priority=0, preemptible=False)
    sess.add(t)
    sess.flush()
    return t.id


def _event(sess, tid: uuid.UUID, kind: str, status: str | None, ago: timedelta = HOUR) -> int:
    seq = 1 + len(sess.execute(select(TrainingEvent.id).where(TrainingEvent.training_id == tid)).all())
    ev = TrainingEvent(training_id=tid, seq=seq, time=utcnow() - ago, kind=kind, status=status)
    sess.add(ev)
    sess.flush()
    return ev.id


def _owed(settings: Settings) -> set[tuple[uuid.UUID, int, str]]:
    with session_scope(settings) as sess:
        return {(d.webhook_id, d.event_id, d.event) for d in sess.execute(select(WebhookDelivery)).scalars()}


def test_an_event_is_owed_to_its_owners_enabled_hooks_that_chose_it(db_settings: Settings) -> None:
    with session_scope(db_settings) as sess:
        every = _hook(sess, "alice", ["training_failed", "training_started"])
        only_started = _hook(sess, "alice", ["training_started"])
        _hook(sess, "alice", ["training_failed"], enabled=False)
        bobs = _hook(sess, "bob", ["training_failed"])
        t = _training(sess, "alice")
        started = _event(sess, t, "status", "running", ago=HOUR)
        _event(sess, t, "checkpoint", None, ago=HOUR)  # not a notification
        failed = _event(sess, t, "status", "failed", ago=HOUR)
    assert outbox.fan_out(db_settings) == 3
    assert _owed(db_settings) == {(every, started, "training_started"), (only_started, started, "training_started"),
                                  (every, failed, "training_failed")}
    assert bobs not in {h for h, _, _ in _owed(db_settings)}


def test_reading_the_events_again_owes_nothing_twice(db_settings: Settings) -> None:
    with session_scope(db_settings) as sess:
        _hook(sess, "alice", ["training_succeeded"])
        t = _training(sess, "alice")
        _event(sess, t, "status", "succeeded")
    assert outbox.fan_out(db_settings) == 1
    assert outbox.fan_out(db_settings) == 0
    with session_scope(db_settings) as sess:  # the cursor set back: the pair (hook, event) is still owed once
        sess.get(NotifyCursor, outbox.CURSOR).last_event_id = 0
    assert outbox.fan_out(db_settings) == 0
    assert len(_owed(db_settings)) == 1


def test_the_cursor_stops_before_an_event_younger_than_the_lag(db_settings: Settings) -> None:
    with session_scope(db_settings) as sess:
        _hook(sess, "alice", ["training_started", "training_failed"])
        t = _training(sess, "alice")
        settled = _event(sess, t, "status", "running", ago=HOUR)
        young = _event(sess, t, "status", "failed", ago=timedelta(seconds=1))
    assert outbox.fan_out(db_settings) == 2  # both owed now ...
    with session_scope(db_settings) as sess:
        assert sess.get(NotifyCursor, outbox.CURSOR).last_event_id == settled  # ... but the young one read again
    assert young > settled and outbox.fan_out(db_settings) == 0


def test_events_before_a_hook_was_made_are_not_owed_to_it(db_settings: Settings) -> None:
    with session_scope(db_settings) as sess:
        _hook(sess, "bob", ["training_started"], made=utcnow() - 4 * HOUR)  # the cursor starts before it
        t = _training(sess, "alice")
        _event(sess, t, "status", "running", ago=3 * HOUR)
        _hook(sess, "alice", ["training_started", "training_succeeded"], made=utcnow() - 2 * HOUR)
        after = _event(sess, t, "status", "succeeded", ago=HOUR)
    assert outbox.fan_out(db_settings) == 1
    assert {e for _, e, _ in _owed(db_settings)} == {after}


def test_a_session_is_owed_by_its_own_events_not_its_status(db_settings: Settings) -> None:
    with session_scope(db_settings) as sess:
        hook = _hook(sess, "alice", ["training_started", "session_ready"])
        s = _training(sess, "alice", kind="session")
        _event(sess, s, "status", "running")
        ready = _event(sess, s, "session_ready", "running")
    assert outbox.fan_out(db_settings) == 1
    assert _owed(db_settings) == {(hook, ready, "session_ready")}


@pytest.mark.parametrize(("attempts", "wait"), [(1, 5.0), (2, 10.0), (3, 20.0), (4, 40.0), (20, 3600.0)])
def test_a_failed_try_waits_twice_as_long_as_the_last_up_to_an_hour(attempts: int, wait: float) -> None:
    from gpufleet.config import load_settings

    assert outbox.backoff_s(load_settings(webhook_backoff_s=5.0), attempts) == wait
