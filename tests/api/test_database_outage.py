"""Requests that meet a stopped PostgreSQL get 503 with Retry-After, never a 500, and nothing is written."""

from __future__ import annotations

import os
import uuid

import pytest
from fastapi.testclient import TestClient
from gpufleet.api.app import create_app
from gpufleet.config import load_settings
from gpufleet.db.models import Training
from gpufleet.db.session import session_scope
from support.people import SECRET, bearer, make_people
from sqlalchemy import func, select
from support.postgres import pg_ctl, start_server

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def _trainings(settings) -> int:
    with session_scope(settings) as sess:
        return sess.scalar(select(func.count()).select_from(Training))


def test_a_stopped_database_answers_503_with_retry_after_and_writes_nothing(pg_migrated_url, pg_control, tmp_path):
    s = load_settings(database_url=pg_migrated_url, data_dir=tmp_path / "d", simulate="2xH100-80GB",
                      secret_key=SECRET, auth="on", host_name=f"outage-{uuid.uuid4().hex[:6]}")
    people = make_people(s, uuid.uuid4().hex[:6])
    before = _trainings(s)
    body = {"name": "during-outage", "recipe": "mlp", "config": {"max_steps": 10}, "gpu_ids": [0]}
    with TestClient(create_app(s), raise_server_exceptions=True) as client:
        assert client.get("/api/v1/trainings", headers=bearer(people.alice)).status_code == 200
        pg_ctl(pg_control, "stop", "-m", "fast", "-w")
        try:
            answers = [
                client.get("/api/v1/trainings", headers=bearer(people.alice)),  # the auth gate meets it first
                client.get("/api/v1/system/gpus", headers=bearer(people.vic)),
                client.post("/api/v1/trainings", json=body, headers=bearer(people.alice)),
            ]
        finally:
            start_server(pg_control)
        for r in answers:
            assert r.status_code == 503, (r.request.url, r.status_code, r.text)
            assert r.headers["retry-after"] == "5"
            detail = r.json()["detail"]
            assert "database is unavailable" in detail and "nothing was done" in detail
            # The database's address stays in the log.
            assert os.environ["GPUFLEET_TEST_PG_PORT"] not in detail and "127.0.0.1" not in detail
        # Back: the same client is served again, and the refused create left nothing behind.
        assert client.get("/api/v1/trainings", headers=bearer(people.alice)).status_code == 200
    assert _trainings(s) == before


def test_the_client_waits_out_a_database_restart_and_creates_the_training_once(pg_migrated_url, pg_control, tmp_path):
    from gpufleet.client import Client
    from support.servers import serve_inprocess

    s = load_settings(database_url=pg_migrated_url, data_dir=tmp_path / "d", simulate="2xH100-80GB",
                      secret_key=SECRET, auth="on", host_name=f"restart-{uuid.uuid4().hex[:6]}")
    people = make_people(s, uuid.uuid4().hex[:6])
    from gpufleet.telemetry.inventory import register_host

    register_host(s)  # the simulated GPUs the create names
    waits: list[float] = []

    class Restarting(Client):
        def _sleep(self, seconds: float) -> None:
            # The database comes back while the client waits out Retry-After.
            waits.append(seconds)
            start_server(pg_control)

    with serve_inprocess(create_app(s)) as srv, Restarting(srv.url, people.alice) as gf:
        pg_ctl(pg_control, "stop", "-m", "fast", "-w")
        try:
            t = gf.create_training(name="through-a-restart", recipe="mlp", config={"max_steps": 1}, gpu_ids=[0],
                                   host=s.host_name)
        finally:
            start_server(pg_control)
        assert waits == [5.0]
        assert t.name == "through-a-restart"
        assert [x.id for x in gf.list_trainings().data if x.name == "through-a-restart"] == [t.id]
