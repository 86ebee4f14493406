"""Groups, quotas and usage through the product's app (sign-in on), on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import date, datetime, timezone

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from gpufleet.config import Settings
from gpufleet.db.models import Group, GroupMember, Quota
from gpufleet.db.session import session_scope
from support.people import SECRET, People, bearer, make_people
from support.sharing import held_training, make_host

DAY = date(2026, 4, 2)


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


# A quota no admin gave booking limits: the server's defaults for a user, none for a group.
NO_BOOKING_LIMITS = {"booking_hours_per_week": None, "booking_max_gpus": None, "booking_max_hours": None,
                     "booking_max_ahead_days": None}

def _rows(settings: Settings) -> tuple[int, ...]:
    with session_scope(settings) as sess:
        return tuple(sess.scalar(select(func.count()).select_from(m)) for m in (Group, GroupMember, Quota))


def test_admin_manages_groups_and_quotas(api: TestClient, team: People) -> None:
    admin, alice, bob = bearer(team.admin), team.names["alice"], team.names["bob"]
    name = "team-" + uuid.uuid4().hex[:6]
    r = api.post("/api/v1/groups", headers=admin, json={"name": name})
    assert r.status_code == 201, r.text
    assert api.post(f"/api/v1/groups/{name}/members/{alice}", headers=admin).status_code == 200
    r = api.post(f"/api/v1/groups/{name}/members/{bob}", headers=admin)
    assert sorted(r.json()["members"]) == sorted([alice, bob])
    r = api.put(f"/api/v1/groups/{name}/quota", headers=admin, json={"max_gpus": 8, "gpu_hours_per_week": 500})
    assert r.status_code == 200 and r.json()["quota"] == {"max_gpus": 8, "gpu_hours_per_week": 500.0,
                                                          "max_priority": None, "max_priority_set_by": None,
                                                          **NO_BOOKING_LIMITS}
    r = api.put(f"/api/v1/users/{alice}/quota", headers=admin, json={"max_gpus": 4, "share": 2})
    assert r.status_code == 200 and r.json() == {"user": alice, "max_gpus": 4, "gpu_hours_per_week": None,
                                                 "share": 2.0, "max_priority": None, "max_priority_set_by": None,
                                                 **NO_BOOKING_LIMITS}
    listed = {q["user"]: q for q in api.get("/api/v1/quotas", headers=admin).json()["data"]}
    assert listed[alice]["max_gpus"] == 4
    groups = {g["name"]: g for g in api.get("/api/v1/groups", headers=admin).json()["data"]}
    assert groups[name]["quota"]["max_gpus"] == 8
    r = api.delete(f"/api/v1/groups/{name}/members/{bob}", headers=admin)
    assert r.status_code == 200 and r.json()["members"] == [alice]
    assert api.delete(f"/api/v1/groups/{name}", headers=admin).status_code == 204
    assert name not in {g["name"] for g in api.get("/api/v1/groups", headers=admin).json()["data"]}


def test_bad_input_is_a_4xx_and_nothing_is_written(api: TestClient, team: People, product: Settings) -> None:
    admin, alice = bearer(team.admin), team.names["alice"]
    name = "team-" + uuid.uuid4().hex[:6]
    assert api.post("/api/v1/groups", headers=admin, json={"name": name}).status_code == 201
    assert api.post(f"/api/v1/groups/{name}/members/{alice}", headers=admin).status_code == 200
    before = _rows(product)
    cases = [
        ("post", "/api/v1/groups", {"name": name}, 409, "already exists"),
        ("post", "/api/v1/groups", {"name": "Not OK"}, 422, "pattern"),
        ("post", f"/api/v1/groups/{name}/members/{alice}", None, 409, "already in group"),
        ("post", f"/api/v1/groups/nosuch-{name}/members/{alice}", None, 404, "no group named"),
        ("post", f"/api/v1/groups/{name}/members/nosuch", None, 404, "no user named"),
        ("put", f"/api/v1/groups/nosuch-{name}/quota", {"max_gpus": 2}, 404, "no group named"),
        ("put", f"/api/v1/groups/{name}/quota", {"max_gpus": -1}, 422, "greater than or equal to 0"),
        ("put", f"/api/v1/users/{alice}/quota", {"gpu_hours_per_week": -3}, 422, "greater than or equal to 0"),
        ("put", f"/api/v1/users/{alice}/quota", {"share": 0}, 422, "greater than 0"),
        ("put", "/api/v1/users/nosuch/quota", {"max_gpus": 1}, 404, "no user named"),
        ("delete", f"/api/v1/groups/nosuch-{name}", None, 404, "no group named"),
        ("delete", f"/api/v1/groups/{name}/members/{team.names['bob']}", None, 409, "is not in group"),
    ]
    for method, url, body, status, why in cases:
        r = api.request(method, url, headers=admin, json=body)
        assert r.status_code == status, (url, body, r.text)
        assert why in r.text, (url, body, r.text)
    assert _rows(product) == before


def test_only_admins_change_groups_and_quotas(api: TestClient, team: People, product: Settings) -> None:
    before = _rows(product)
    for token in (team.alice, team.vic):
        assert api.post("/api/v1/groups", headers=bearer(token), json={"name": "mine"}).status_code == 403
        assert api.put(f"/api/v1/users/{team.names['alice']}/quota", headers=bearer(token),
                       json={"max_gpus": 99}).status_code == 403
        assert api.get("/api/v1/groups", headers=bearer(token)).status_code == 200
    assert api.post("/api/v1/groups", json={"name": "mine"}).status_code == 401
    assert _rows(product) == before


def test_usage_of_a_day_is_the_held_time_of_its_allocations(api: TestClient, team: People,
                                                             product: Settings) -> None:
    alice = team.names["alice"]

    def at(hh: int, mm: int = 0) -> datetime:
        return datetime(DAY.year, DAY.month, DAY.day, hh, mm, tzinfo=timezone.utc)

    host = make_host(product)
    held_training(product, host, alice, [(0, at(9), at(10, 30)), (1, at(9), at(9, 20))])  # 5400 + 1200
    held_training(product, host, alice, [(2, at(23, 50), None)], status="running")  # 600 s to midnight
    r = api.get(f"/api/v1/usage?by=user&from={DAY}&to={DAY}", headers=bearer(team.vic))
    assert r.status_code == 200, r.text
    row = next(x for x in r.json()["data"] if x["name"] == alice)
    assert row["day"] == str(DAY) and row["trainings"] == 2
    assert row["gpu_seconds_held"] == 5400 + 1200 + 600
    assert row["gpu_hours_held"] == pytest.approx((5400 + 1200 + 600) / 3600, abs=1e-4)


@pytest.mark.parametrize(("query", "status", "why"), [
    ("by=team", 422, "'user', 'group' or 'training'"),
    # A bad query value is a 422, as everywhere else.
    ("from=yesterday", 422, "from='yesterday' is not a day; use YYYY-MM-DD"),
    ("from=2026-13-01", 422, "from='2026-13-01' is not a day"),
    ("from=2026-04-03&to=2026-04-01", 422, "before from"),
    ("from=2020-01-01&to=2026-01-01", 422, "at most 366"),
])
def test_bad_usage_questions_say_what_to_fix(api: TestClient, team: People, query: str, status: int,
                                             why: str) -> None:
    r = api.get(f"/api/v1/usage?{query}", headers=bearer(team.vic))
    assert r.status_code == status and why in r.text, r.text
