"""Webhooks delivered from training events: a real receiver on loopback, real signatures, retries, a restart.

The events are written by the lifecycle's own ``transition`` (what the worker
calls), the deliveries by the real sending thread (``jobs.notify_loop``)
against a real HTTP server in this test. SQLite and PostgreSQL both run.
"""

from __future__ import annotations

import json
import threading
import uuid

import pytest
from fastapi.testclient import TestClient
from gpufleet.api.app import guarded_app
from gpufleet.api.routes import trainings, webhooks
from gpufleet.db.models import Training
from gpufleet.db.notify import WebhookDelivery
from gpufleet.db.session import session_scope, write_session
from gpufleet.jobs import notify_loop
from gpufleet.lifecycle.transitions import transition
from support.receiver import Receiver, signed
from sqlalchemy import select, update

from support.fleet import make_settings, register, wait_for

pytestmark = pytest.mark.slow
MLP = {"max_steps": 4, "global_batch_size": 8}


def _move(settings, tid: str, before: str, after: str, kind: str = "status") -> None:
    with write_session(settings) as sess:
        assert transition(sess, uuid.UUID(tid), [before], after, reason=f"to {after} in the test", kind=kind)


def test_webhooks_get_signed_events_retries_and_survive_a_restart(tmp_path, backend, request) -> None:
    # The receivers listen on loopback, which webhooks reach only when an admin allows it.
    settings = make_settings(tmp_path, backend, request, webhook_backoff_s=0.2,
                             webhook_allowed_networks=["127.0.0.1/32"])
    register(settings)
    good, flaky = Receiver(), Receiver(fail=2)
    c = TestClient(guarded_app(settings, trainings.router, webhooks.router))
    stop = threading.Event()
    try:
        r = c.post("/api/v1/webhooks", json={"url": good.url})
        assert r.status_code == 201, r.text
        secret = r.json()["secret"]
        r = c.post("/api/v1/webhooks", json={"url": flaky.url, "format": "slack", "events": ["training_failed"]})
        assert r.status_code == 201, r.text
        flaky_id = r.json()["id"]
        made = [c.post("/api/v1/trainings", json={"name": f"hooked-{i}", "recipe": "mlp", "config": MLP}).json()["id"]
                for i in range(2)]
        _move(settings, made[0], "queued", "running")
        _move(settings, made[0], "running", "succeeded")
        _move(settings, made[1], "queued", "failed")
        loop = notify_loop.start(settings, settings, stop, poll_s=0.1)
        wait_for(lambda: len(good.got) >= 3, 120, "three notifications at the JSON receiver")
        assert good.events() == ["training_started", "training_succeeded", "training_failed"]  # in event order
        for headers, raw in good.got:
            assert signed(secret, headers, raw), headers
            body = json.loads(raw)
            assert body["event"] == headers["x-gpufleet-event"] and body["training"]["id"] in made
            assert headers["idempotency-key"] == body["id"]
        # The failing receiver answered 500 twice: the same delivery, tried again, then taken.
        wait_for(lambda: len(flaky.got) >= 3, 120, "the flaky receiver's third try")
        keys = {h["idempotency-key"] for h, _ in flaky.got}
        assert len(keys) == 1 and flaky.events() == ["training_failed"] * 3
        assert "failed" in json.loads(flaky.got[-1][1])["text"]
        with session_scope(settings) as sess:
            d = sess.execute(select(WebhookDelivery)
                             .where(WebhookDelivery.webhook_id == uuid.UUID(flaky_id))).scalar_one()
            wait_for(lambda: _delivered(settings, d.id), 60, "the retried delivery recorded")
        # Stopped (a restart): an event written meanwhile is sent by the next sender.
        stop.set()
        loop.join(30)
        third = c.post("/api/v1/trainings", json={"name": "after-restart", "recipe": "mlp", "config": MLP}).json()["id"]
        _move(settings, third, "queued", "preempted")
        # A session (a trainings row of kind session) notifies through its own events, not its status ones.
        session = c.post("/api/v1/trainings", json={"name": "a-session", "recipe": "mlp", "config": MLP}).json()["id"]
        with write_session(settings) as sess:
            sess.execute(update(Training).where(Training.id == uuid.UUID(session)).values(kind="session"))
        _move(settings, session, "queued", "running")
        _move(settings, session, "running", "running", kind="session_ready")
        _move(settings, session, "running", "cancelled", kind="session_stopped")
        stop = threading.Event()
        notify_loop.start(settings, settings, stop, poll_s=0.1)
        wait_for(lambda: len(good.got) >= 6, 120, "the events written while no sender ran")
        assert good.events()[3:] == ["training_preempted", "session_ready", "session_stopped"]
        assert json.loads(good.got[-1][1])["training"]["kind"] == "session"
        assert len(good.got) == 6  # nothing sent twice
    finally:
        stop.set()
        good.close()
        flaky.close()
        c.close()


def _delivered(settings, did: int) -> bool:
    with session_scope(settings) as sess:
        d = sess.get(WebhookDelivery, did)
        return d is not None and d.delivered_at is not None and d.attempts == 3
