"""Members cannot rank themselves above everyone: priority caps and the non_preemptible permission.

Through the product's app with sign-in on, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from gpufleet.config import Settings
from gpufleet.db.models import Training
from gpufleet.db.session import session_scope
from gpufleet.users.accounts import set_permission
from support.people import SECRET, People, bearer, make_people

SMALL = {"max_steps": 5, "global_batch_size": 8}


@pytest.fixture
def product(db_settings: Settings) -> Settings:
    from gpufleet.telemetry.inventory import register_host

    s = db_settings.model_copy(update={"auth": "on", "secret_key": SECRET, "simulate": "2xH100-80GB",
                                       "host_name": "caps-" + uuid.uuid4().hex[:8]})
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


def _create(api: TestClient, token: str, **fields):
    body = {"name": "rank", "recipe": "mlp", "config": SMALL, **fields}
    return api.post("/api/v1/trainings", headers=bearer(token), json=body)


def _owned(settings: Settings, owner: str) -> int:
    with session_scope(settings) as sess:
        return sess.scalar(select(func.count()).select_from(Training).where(Training.owner == owner))


def test_a_member_cannot_go_above_the_default_cap_and_nothing_is_written(api: TestClient, product: Settings,
                                                                        team: People) -> None:
    alice = team.names["alice"]
    r = _create(api, team.alice, priority=1000)
    assert r.status_code == 403
    detail = r.json()["detail"]
    assert "above 0" in detail and "GPUFLEET_MEMBER_MAX_PRIORITY" in detail and "--max-priority" in detail
    r = api.post("/api/v1/trainings/batch", headers=bearer(team.alice),
                 json={"items": [{"name": "b", "recipe": "mlp", "config": SMALL}], "priority": 5})
    assert r.status_code == 403 and "above 0" in r.json()["detail"]
    assert _owned(product, alice) == 0
    # At or below the default is every member's to choose; admins have no cap.
    assert _create(api, team.alice, priority=0).status_code == 201
    assert _create(api, team.alice, priority=-5).status_code == 201
    assert _create(api, team.admin, priority=1000).status_code == 201


def test_a_cap_an_admin_sets_lets_a_member_go_up_to_it(api: TestClient, product: Settings, team: People) -> None:
    admin, alice, bob = team.names["admin"], team.names["alice"], team.names["bob"]
    r = api.put(f"/api/v1/users/{alice}/quota", headers=bearer(team.admin), json={"max_priority": 50})
    assert r.status_code == 200 and r.json()["max_priority"] == 50 and r.json()["max_priority_set_by"] == admin
    assert _create(api, team.alice, priority=50).status_code == 201
    r = _create(api, team.alice, priority=51)
    assert r.status_code == 403
    assert "above 50" in r.json()["detail"] and f"set by {admin}" in r.json()["detail"]
    assert _owned(product, alice) == 1

    # A group's cap reaches its members; a member's own cap wins over the group's.
    group = "g-" + uuid.uuid4().hex[:6]
    assert api.post("/api/v1/groups", headers=bearer(team.admin), json={"name": group}).status_code == 201
    for member in (alice, bob):
        assert api.post(f"/api/v1/groups/{group}/members/{member}", headers=bearer(team.admin)).status_code == 200
    r = api.put(f"/api/v1/groups/{group}/quota", headers=bearer(team.admin), json={"max_priority": 20})
    assert r.status_code == 200 and r.json()["quota"]["max_priority"] == 20
    assert r.json()["quota"]["max_priority_set_by"] == admin
    assert _create(api, team.bob, priority=20).status_code == 201
    r = _create(api, team.bob, priority=21)
    assert r.status_code == 403 and f"group {group!r}" in r.json()["detail"]
    assert _create(api, team.alice, priority=50).status_code == 201

    # Members may not set caps; the bounds are the priority's.
    r = api.put(f"/api/v1/users/{bob}/quota", headers=bearer(team.bob), json={"max_priority": 1000})
    assert r.status_code == 403
    r = api.put(f"/api/v1/users/{bob}/quota", headers=bearer(team.admin), json={"max_priority": 1001})
    assert r.status_code == 422
    listed = {q["user"]: q for q in api.get("/api/v1/quotas", headers=bearer(team.vic)).json()["data"]}
    assert listed[alice]["max_priority"] == 50 and bob not in listed


def test_not_preemptible_needs_the_permission(api: TestClient, product: Settings, team: People) -> None:
    bob = team.names["bob"]
    r = _create(api, team.bob, preemptible=False)
    assert r.status_code == 403
    detail = r.json()["detail"]
    assert "non_preemptible" in detail and f"gpufleet users grant {bob} non_preemptible" in detail
    assert _owned(product, bob) == 0
    assert _create(api, team.admin, preemptible=False).status_code == 201
    with session_scope(product) as sess:
        set_permission(sess, bob, "non_preemptible", True)
    r = _create(api, team.bob, preemptible=False)
    assert r.status_code == 201 and r.json()["preemptible"] is False


def test_where_members_are_not_preemptible_by_default_asking_so_needs_nothing(product: Settings,
                                                                             team: People) -> None:
    from gpufleet.api.app import create_app

    with TestClient(create_app(product.model_copy(update={"preemptible_default": False}))) as api:
        r = _create(api, team.alice, preemptible=False)
        assert r.status_code == 201 and r.json()["preemptible"] is False
