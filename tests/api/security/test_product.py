"""The product's own routes (`create_app`) behind sign-in, on SQLite and PostgreSQL.

These prove the routes use the auth layer as the contract says: refusals
without a token, ownership of trainings, read-only viewers, paths confined to
the data root, recipes only from entry points, events that name the user, and
the real WebSocket endpoint's checks.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from gpufleet.config import Settings
from gpufleet.db.models import Training, TrainingEvent
from gpufleet.db.session import session_scope
from support.people import SECRET, People, bearer, make_people, ws_refused
from sqlalchemy import func, select

SMALL = {"max_steps": 5, "global_batch_size": 8}


@pytest.fixture
def product(db_settings: Settings) -> Settings:
    from gpufleet.telemetry.inventory import register_host

    s = db_settings.model_copy(
        update={
            "auth": "on",
            "secret_key": SECRET,
            "simulate": "4xH100-80GB",
            # PostgreSQL is shared by the session: one host per test.
            "host_name": "auth-" + uuid.uuid4().hex[:8],
        }
    )
    register_host(s)
    return s


@pytest.fixture
def team(product: Settings) -> People:
    return make_people(product, suffix="-" + uuid.uuid4().hex[:6])


@pytest.fixture
def api(product: Settings) -> Iterator[TestClient]:
    from gpufleet.api.app import create_app

    with TestClient(create_app(product)) as c:
        yield c


def _count(settings: Settings, owner: str | None = None) -> int:
    with session_scope(settings) as sess:
        q = select(func.count()).select_from(Training)
        if owner:
            q = q.where(Training.owner == owner)
        return sess.scalar(q) or 0


def _create(api: TestClient, token: str, **extra) -> dict:
    body = {"name": "t-" + uuid.uuid4().hex[:6], "recipe": "mlp", "config": dict(SMALL),
            "host": api.app.state.settings.host_name, **extra}
    r = api.post("/api/v1/trainings", json=body, headers=bearer(token))
    assert r.status_code == 201, r.text
    return r.json()


def test_without_a_token_every_operation_is_refused(api: TestClient, product: Settings, team: People) -> None:
    before = _count(product)
    schema = api.app.openapi()
    checked = 0
    for path, ops in schema["paths"].items():
        # Open: signing in (with a token, or a sign-in link, whose code is the credential) and out, and a
        # bookings feed (its feed token is its credential: tests/bookings/test_feeds.py).
        if path in ("/healthz", "/api/v1/auth/sign-in", "/api/v1/auth/link", "/api/v1/auth/sign-out",
                    "/api/v1/bookings.ics"):
            continue
        url = path.replace("{training_id}", str(uuid.uuid4()))
        for method in ops:
            r = api.request(method.upper(), url, json={"name": "x", "recipe": "mlp"})
            assert r.status_code == 401, (method, path, r.status_code)
            assert "sign-in required" in r.json()["detail"]
            checked += 1
    assert checked >= 15
    assert api.get("/metrics").status_code == 401
    assert _count(product) == before


def test_member_cannot_cancel_another_members_training(api: TestClient, product: Settings, team: People) -> None:
    t = _create(api, team.alice)
    assert t["owner"] == team.names["alice"]
    r = api.post(f"/api/v1/trainings/{t['id']}/cancel", headers=bearer(team.bob))
    assert r.status_code == 403
    assert f"belongs to {team.names['alice']!r}" in r.json()["detail"]
    assert api.get(f"/api/v1/trainings/{t['id']}", headers=bearer(team.bob)).json()["status"] == "queued"
    # Members see everything, including others' trainings.
    listed = api.get("/api/v1/trainings", params={"owner": team.names["alice"]}, headers=bearer(team.bob)).json()
    assert [x["id"] for x in listed["data"]] == [t["id"]]
    r = api.post(f"/api/v1/trainings/{t['id']}/cancel", headers=bearer(team.alice))
    assert r.status_code == 200 and r.json()["status"] == "cancelled"


def test_admin_cancels_any_and_events_name_the_user(api: TestClient, product: Settings, team: People) -> None:
    t = _create(api, team.bob)
    r = api.post(f"/api/v1/trainings/{t['id']}/cancel", headers=bearer(team.admin))
    assert r.status_code == 200
    with session_scope(product) as sess:
        users = {(e.kind, e.status, e.user) for e in sess.scalars(
            select(TrainingEvent).where(TrainingEvent.training_id == uuid.UUID(t["id"])))}
    assert any(u == team.names["bob"] for _, _, u in users), users
    assert any(u == team.names["admin"] for _, _, u in users), users


def test_viewer_reads_but_cannot_create_or_cancel(api: TestClient, product: Settings, team: People) -> None:
    t = _create(api, team.alice)
    before = _count(product)
    body = {"name": "v", "recipe": "mlp", "config": SMALL}
    r = api.post("/api/v1/trainings", json=body, headers=bearer(team.vic))
    assert r.status_code == 403 and "viewer role" in r.json()["detail"]
    r = api.post("/api/v1/trainings/batch", json={"items": [body]}, headers=bearer(team.vic))
    assert r.status_code == 403
    r = api.post(f"/api/v1/trainings/{t['id']}/cancel", headers=bearer(team.vic))
    assert r.status_code == 403
    assert _count(product) == before
    assert api.get("/api/v1/system/gpus", headers=bearer(team.vic)).status_code == 200
    assert api.get(f"/api/v1/trainings/{t['id']}", headers=bearer(team.vic)).status_code == 200


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "ok/../../secret.npy", "link/x.npy"])
def test_a_data_path_outside_the_data_root_is_refused(api: TestClient, product: Settings, team: People,
                                                      path: str, tmp_path) -> None:
    root = product.data_root
    root.mkdir(parents=True, exist_ok=True)
    (root / "ok").mkdir(exist_ok=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.npy").write_bytes(b"")
    # A link inside the root that leads out of it must not be a way around the check.
    if not (root / "link").exists():
        os.symlink(outside, root / "link")
    before = _count(product)
    r = api.post("/api/v1/trainings", headers=bearer(team.alice),
                 json={"name": "p", "recipe": "mlp", "config": {**SMALL, "data_path": path}})
    assert 400 <= r.status_code < 500, r.text
    assert "outside the data root" in str(r.json()["detail"])
    assert _count(product) == before


def test_recipes_come_only_from_installed_entry_points(api: TestClient, product: Settings, team: People) -> None:
    before = _count(product)
    for recipe in ("os:system", "gpufleet.engine.launch", "../mlp", "builtins.eval"):
        r = api.post("/api/v1/trainings", headers=bearer(team.alice), json={"name": "r", "recipe": recipe})
        assert r.status_code == 422 and "installed recipes" in r.json()["detail"], recipe
    assert _count(product) == before



def test_live_stream_checks_credentials_and_origin(api: TestClient, team: People) -> None:
    assert ws_refused(api, "/api/v1/ws") == 1008
    ticket = api.post("/api/v1/auth/ws-ticket", headers=bearer(team.vic)).json()["ticket"]
    assert ws_refused(api, f"/api/v1/ws?ticket={ticket}", {"Origin": "https://evil.example"}) == 1008
    ticket = api.post("/api/v1/auth/ws-ticket", headers=bearer(team.vic)).json()["ticket"]
    with api.websocket_connect(f"/api/v1/ws?ticket={ticket}", headers={"Origin": "http://testserver"}) as ws:
        assert ws.receive_json()["type"] == "hello"
    # The ticket was used up.
    assert ws_refused(api, f"/api/v1/ws?ticket={ticket}") == 1008


def test_nul_in_a_query_is_a_4xx_on_both_databases(api: TestClient, team: People) -> None:
    # PostgreSQL cannot store U+0000; this was a 500 there before the guard.
    for url in ("/api/v1/system/topology?host=%00", "/api/v1/trainings?owner=a%00b", "/api/v1/system/gpus?host=%00"):
        r = api.get(url, headers=bearer(team.vic))
        assert r.status_code == 422, (url, r.text)
    r = api.post("/api/v1/trainings", headers=bearer(team.alice), json={"name": "a\u0000", "recipe": "mlp"})
    assert r.status_code == 422


def test_only_admins_drain_gpus(api: TestClient, product: Settings, team: People) -> None:
    url = f"/api/v1/system/gpus/{product.host_name}/0/drain"
    assert api.post(url, json={"reason": "x"}).status_code == 401
    for token in (team.alice, team.vic):
        r = api.post(url, json={"reason": "x"}, headers=bearer(token))
        assert r.status_code == 403 and r.json()["detail"]
    gpus = api.get("/api/v1/system/gpus", params={"host": product.host_name}, headers=bearer(team.vic)).json()
    assert not any(g["drained"] for g in gpus["data"])
    r = api.post(url, json={"reason": "fan swap"}, headers=bearer(team.admin))
    assert r.status_code == 200 and r.json()["reason"] == f"fan swap (by {team.names['admin']})"


def test_members_trainings_are_preemptible_by_default_and_admins_are_not(api: TestClient, product: Settings,
                                                                         team: People) -> None:
    from gpufleet.users.accounts import set_permission

    assert _create(api, team.alice)["preemptible"] is True
    assert _create(api, team.admin)["preemptible"] is False
    # Either may say otherwise (a member once granted non_preemptible: tests/api/test_priority_caps.py).
    with session_scope(product) as sess:
        set_permission(sess, team.names["alice"], "non_preemptible", True)
    assert _create(api, team.alice, preemptible=False)["preemptible"] is False
    assert _create(api, team.admin, preemptible=True)["preemptible"] is True
