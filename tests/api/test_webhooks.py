"""A user's webhooks through the API (sign-in on): each sees and changes only their own, bad input is a 4xx."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from gpufleet.api.app import guarded_app
from gpufleet.api.routes import webhooks
from gpufleet.config import Settings
from gpufleet.db.notify import Webhook
from gpufleet.db.session import session_scope
from support.people import SECRET, People, bearer, make_people


@pytest.fixture
def product(db_settings: Settings) -> Settings:
    return db_settings.model_copy(update={"auth": "on", "secret_key": SECRET, "webhooks_per_user": 3})


@pytest.fixture
def team(product: Settings) -> People:
    return make_people(product, suffix="-" + uuid.uuid4().hex[:6])


@pytest.fixture
def api(product: Settings) -> Iterator[TestClient]:
    with TestClient(guarded_app(product, webhooks.router)) as c:
        yield c


def _count(settings: Settings, owner: str) -> int:
    with session_scope(settings) as sess:
        return sess.execute(select(func.count()).select_from(Webhook).where(Webhook.owner == owner)).scalar_one()


def test_a_member_sees_and_changes_only_their_own_hooks(api: TestClient, team: People, product: Settings) -> None:
    alice, bob = bearer(team.alice), bearer(team.bob)
    r = api.post("/api/v1/webhooks", headers=alice, json={"url": "https://hooks.example.org/a",
                                                          "events": ["training_failed", "session_ready"]})
    assert r.status_code == 201, r.text
    hook = r.json()
    assert hook["secret"].startswith("whsec_") and hook["owner"] == team.names["alice"]
    assert hook["events"] == ["training_failed", "session_ready"] and hook["format"] == "json"
    listed = api.get("/api/v1/webhooks", headers=alice).json()
    assert [h["id"] for h in listed["data"]] == [hook["id"]] and "secret" not in listed["data"][0]
    assert api.get(f"/api/v1/webhooks/{hook['id']}", headers=alice).json()["url"] == "https://hooks.example.org/a"
    # Bob: not in his list, and every operation on it is a 404, as for a hook that does not exist.
    assert api.get("/api/v1/webhooks", headers=bob).json()["count"] == 0
    for method, path, body in (("GET", "", None), ("PATCH", "", {"enabled": False}), ("DELETE", "", None),
                               ("POST", "/test", None)):
        r = api.request(method, f"/api/v1/webhooks/{hook['id']}{path}", headers=bob, json=body)
        assert r.status_code == 404, (method, path, r.text)
    admin = bearer(team.admin)
    assert api.delete(f"/api/v1/webhooks/{hook['id']}", headers=admin).status_code == 404
    assert api.get(f"/api/v1/webhooks/{hook['id']}", headers=alice).json()["enabled"] is True
    # A viewer has no trainings to hear of: nothing to register, nothing of others' to read.
    vic = bearer(team.vic)
    assert api.post("/api/v1/webhooks", headers=vic, json={"url": "https://e.org/v"}).status_code == 403
    assert api.get("/api/v1/webhooks", headers=vic).json()["count"] == 0
    # The owner changes and removes it.
    r = api.patch(f"/api/v1/webhooks/{hook['id']}", headers=alice, json={"format": "slack", "enabled": False})
    assert r.status_code == 200 and r.json()["format"] == "slack" and r.json()["enabled"] is False
    assert api.delete(f"/api/v1/webhooks/{hook['id']}", headers=alice).status_code == 204
    assert _count(product, team.names["alice"]) == 0


@pytest.mark.parametrize("body, says", [
    ({"url": "ftp://example.org/x"}, "http:// or https://"),
    ({"url": "example.org/hook"}, "http:// or https://"),
    ({"url": "https:///nohost"}, "names no host"),
    ({"url": "https://user:pw@example.org/"}, "user name or password"),
    ({"url": "http://example.org:notaport/"}, "is not a URL"),
    ({"url": "https://example.org/", "format": "teams"}, "format"),
    ({"url": "https://example.org/", "events": ["training_exploded"]}, "events"),
    ({"url": "https://example.org/", "events": []}, "events"),
    ({"url": "https://example.org/", "secret": "mine"}, "secret"),
])
def test_bad_hooks_are_refused_and_nothing_is_written(api: TestClient, team: People, product: Settings,
                                                      body: dict, says: str) -> None:
    r = api.post("/api/v1/webhooks", headers=bearer(team.alice), json=body)
    assert r.status_code == 422, r.text
    assert says in r.text
    assert _count(product, team.names["alice"]) == 0


def test_the_per_user_limit_is_a_clear_refusal(api: TestClient, team: People) -> None:
    alice = bearer(team.alice)
    for i in range(3):
        assert api.post("/api/v1/webhooks", headers=alice, json={"url": f"https://e.org/{i}"}).status_code == 201
    r = api.post("/api/v1/webhooks", headers=alice, json={"url": "https://e.org/4"})
    assert r.status_code == 422 and "GPUFLEET_WEBHOOKS_PER_USER" in r.text
