"""A host whose heartbeat stopped is offline: in /system/hosts and for the scheduler."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from gpufleet.db.models import Host
from gpufleet.db.session import session_scope
from gpufleet.db.types import utcnow
from gpufleet.jobs.scheduler_loop import tick
from sqlalchemy import update

from support.fleet import TINY_SAE, api_app, make_settings, register, unique, wait_for


def test_a_host_with_a_stale_heartbeat_is_offline_and_gets_no_training(tmp_path, backend, request):
    a = make_settings(tmp_path, backend, request, host_name=unique("a-host"))
    b = a.model_copy(update={"host_name": unique("b-host")})
    from gpufleet.jobs.worker import ensure_host

    ensure_host(a)  # registered, but nothing keeps its heartbeat (register() would)
    register(b)
    # Host A's agent stopped ten minutes ago; its row still says "online".
    with session_scope(a) as sess:
        sess.execute(update(Host).where(Host.name == a.host_name)
                     .values(last_heartbeat=utcnow() - timedelta(minutes=10), status="online"))
    from gpufleet.api.app import create_app

    with TestClient(create_app(a)) as c:
        hosts = {h["name"]: h for h in c.get("/api/v1/system/hosts").json()["data"]}
        assert hosts[a.host_name]["status"] == "offline"
        assert hosts[b.host_name]["status"] == "online"

    with TestClient(api_app(a)) as c:
        # The server chooses the host (names sort A first): never the offline one.
        tid = c.post("/api/v1/trainings", json={"name": "placed", "recipe": "sae", "config": TINY_SAE,
                                                "world_size": 1}).json()["id"]
        wait_for(lambda: tick(a).scheduled or c.get(f"/api/v1/trainings/{tid}").json()["status"] != "queued",
                 30, "the training to be placed")
        body = c.get(f"/api/v1/trainings/{tid}").json()
        assert body["status"] == "scheduled" and body["host_name"] == b.host_name, body
