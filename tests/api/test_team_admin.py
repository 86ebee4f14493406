"""The admin area's API: users, roles, permissions and tokens, as `gpufleet users`/`tokens` manage them.

Through the product's app with sign-in on, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from gpufleet.config import Settings
from gpufleet.db.models import User
from gpufleet.db.session import session_scope
from support.people import SECRET, People, bearer, make_people


@pytest.fixture
def product(db_settings: Settings) -> Settings:
    return db_settings.model_copy(update={"auth": "on", "secret_key": SECRET})


@pytest.fixture
def team(product: Settings) -> People:
    return make_people(product, suffix="-" + uuid.uuid4().hex[:6])


@pytest.fixture
def api(product: Settings) -> Iterator[TestClient]:
    from gpufleet.api.app import create_app

    with TestClient(create_app(product)) as c:
        yield c


def _users(settings: Settings) -> int:
    with session_scope(settings) as sess:
        return sess.scalar(select(func.count()).select_from(User)) or 0


def test_an_admin_adds_a_user_changes_role_and_permissions_and_sees_them_listed(
        api: TestClient, product: Settings, team: People) -> None:
    name = "carol-" + uuid.uuid4().hex[:6]
    r = api.post("/api/v1/users", headers=bearer(team.admin), json={"name": name, "role": "viewer"})
    assert r.status_code == 201, r.text
    assert r.json()["role"] == "viewer" and r.json()["live_tokens"] == 0 and r.json()["disabled"] is False
    r = api.patch(f"/api/v1/users/{name}", headers=bearer(team.admin), json={"role": "member", "run_code": True})
    assert r.status_code == 200 and r.json()["role"] == "member" and r.json()["run_code"] is True
    listed = {u["name"]: u for u in api.get("/api/v1/users", headers=bearer(team.admin)).json()["data"]}
    assert listed[name]["role"] == "member" and listed[name]["run_code"] is True
    assert listed[team.names["alice"]]["live_tokens"] == 1


def test_bad_input_is_a_4xx_naming_the_fix_and_writes_nothing(api: TestClient, product: Settings, team: People) -> None:
    before = _users(product)
    r = api.post("/api/v1/users", headers=bearer(team.admin), json={"name": "Bad Name!", "role": "member"})
    assert r.status_code == 422
    r = api.post("/api/v1/users", headers=bearer(team.admin), json={"name": "zed", "role": "owner"})
    assert r.status_code == 422
    r = api.post("/api/v1/users", headers=bearer(team.admin), json={"name": team.names["alice"]})
    assert r.status_code == 409 and "already exists" in r.json()["detail"]
    r = api.patch("/api/v1/users/nobody-here", headers=bearer(team.admin), json={"role": "viewer"})
    assert r.status_code == 404 and "gpufleet users add" in r.json()["detail"]
    assert _users(product) == before


def test_members_and_viewers_read_the_team_and_their_own_tokens_but_change_nothing(
        api: TestClient, product: Settings, team: People) -> None:
    for key, token in (("alice", team.alice), ("vic", team.vic)):
        names = {u["name"] for u in api.get("/api/v1/users", headers=bearer(token)).json()["data"]}
        assert {team.names["admin"], team.names["bob"]} <= names
        own = api.get("/api/v1/tokens", headers=bearer(token)).json()["data"]
        assert [t["user"] for t in own] == [team.names[key]]
        assert api.get("/api/v1/tokens", headers=bearer(token), params={"user": team.names["admin"]}).json() == {
            "data": [], "count": 0}
        assert api.post("/api/v1/users", headers=bearer(token), json={"name": "mallory"}).status_code == 403
        r = api.patch(f"/api/v1/users/{team.names['alice']}", headers=bearer(token), json={"role": "admin"})
        assert r.status_code == 403
        assert api.post("/api/v1/tokens", headers=bearer(token),
                        json={"user": team.names["admin"]}).status_code == 403
    assert api.get("/api/v1/users").status_code == 401


def test_a_token_made_in_the_admin_area_works_once_shown_and_stops_when_revoked(
        api: TestClient, team: People) -> None:
    bob = team.names["bob"]
    r = api.post("/api/v1/tokens", headers=bearer(team.admin), json={"user": bob, "name": "laptop", "expires_days": 30})
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["secret"].startswith(made["prefix"]) and made["user"] == bob and made["expires_at"]
    assert api.get("/api/v1/auth/whoami", headers=bearer(made["secret"])).json()["name"] == bob
    listed = api.get("/api/v1/tokens", headers=bearer(team.admin), params={"user": bob}).json()["data"]
    assert {t["name"] for t in listed} == {"default", "laptop"}
    assert all("secret" not in t for t in listed)
    r = api.post(f"/api/v1/tokens/{made['id']}/revoke", headers=bearer(team.admin))
    assert r.status_code == 200 and r.json()["revoked_at"]
    assert api.get("/api/v1/auth/whoami", headers=bearer(made["secret"])).status_code == 401
    r = api.post(f"/api/v1/tokens/{uuid.uuid4()}/revoke", headers=bearer(team.admin))
    assert r.status_code == 404


def test_disabling_a_user_stops_their_tokens(api: TestClient, team: People) -> None:
    r = api.patch(f"/api/v1/users/{team.names['bob']}", headers=bearer(team.admin), json={"disabled": True})
    assert r.status_code == 200 and r.json()["disabled"] is True
    assert api.get("/api/v1/auth/whoami", headers=bearer(team.bob)).status_code == 401


def test_the_last_active_admin_can_be_neither_demoted_nor_disabled(tmp_path) -> None:  # noqa: ANN001
    from gpufleet.api.app import create_app
    from gpufleet.config import load_settings
    from gpufleet.db.session import upgrade_database

    s = load_settings(data_dir=tmp_path / "data").model_copy(update={"auth": "on", "secret_key": SECRET})
    upgrade_database(s)
    team = make_people(s)
    with TestClient(create_app(s)) as api:
        for change in ({"role": "member"}, {"disabled": True}):
            r = api.patch("/api/v1/users/admin", headers=bearer(team.admin), json=change)
            assert r.status_code == 409 and "last active admin" in r.json()["detail"]
        # With a second admin, the first may step down.
        assert api.patch("/api/v1/users/alice", headers=bearer(team.admin), json={"role": "admin"}).status_code == 200
        assert api.patch("/api/v1/users/admin", headers=bearer(team.admin), json={"role": "member"}).status_code == 200
