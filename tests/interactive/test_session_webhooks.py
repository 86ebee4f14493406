"""A session on a real worker notifies its owner's webhook: ready, then stopped, each signed.

Single-user mode (the local admin's session runs as the worker's account), the
embedded SQLite database and filesystem broker, a real Celery worker, the
scheduler loop and the webhooks' sending thread, and a receiver on loopback.
"""

from __future__ import annotations

import json
import threading

import pytest
from fastapi.testclient import TestClient
from support.fleet import make_settings, register, wait_for
from support.receiver import Receiver, signed

from gpufleet.api.app import create_app
from gpufleet.jobs import notify_loop

pytestmark = pytest.mark.slow


def test_a_session_notifies_ready_and_stopped(tmp_path, workers, scheduler) -> None:
    # The receiver listens on loopback, which webhooks reach only when an admin allows it.
    settings = make_settings(tmp_path, "sqlite", simulate="1xH100-80GB", webhook_allowed_networks=["127.0.0.1/32"])
    register(settings)
    receiver, stop = Receiver(), threading.Event()
    try:
        workers(settings)
        scheduler(settings)
        notify_loop.start(settings, settings, stop, poll_s=0.2)
        c = TestClient(create_app(settings))
        r = c.post("/api/v1/webhooks", json={"url": receiver.url, "events": ["session_ready", "session_stopped",
                                                                             "training_started"]})
        assert r.status_code == 201, r.text
        secret = r.json()["secret"]
        r = c.post("/api/v1/sessions", json={"gpus": 1, "hours": 1})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        wait_for(lambda: "session_ready" in receiver.events(), 240, "session_ready at the receiver", 0.3)
        assert c.post(f"/api/v1/sessions/{sid}/stop").status_code == 200
        wait_for(lambda: "session_stopped" in receiver.events(), 240, "session_stopped at the receiver", 0.3)
        assert receiver.events() == ["session_ready", "session_stopped"]  # its rows' status events say nothing
        for headers, raw in receiver.got:
            assert signed(secret, headers, raw)
            body = json.loads(raw)
            assert body["training"]["id"] == sid and body["training"]["kind"] == "session"
        assert json.loads(receiver.got[1][1])["data"]["reason"] == "user"
    finally:
        stop.set()
        receiver.close()
