"""A user's and a group's own booking limits, set by an admin (the API and `gpufleet … set-quota`): a user's
replace the server's defaults for her; a group's count all its members' bookings together, as its quota
counts their work; a refusal names the field and whose limit, and writes nothing; an admin books past them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from support.people import bearer

API = "/api/v1/bookings"


def _start(days: float = 2, hour: int = 10) -> datetime:
    day = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) + timedelta(days=days)
    return day.replace(hour=hour)


def _soon(hours: int) -> datetime:
    """A whole hour ``hours`` after the next one."""
    return datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) + timedelta(hours=hours + 1)


def _book(app_client, token: str, start: datetime, hours: float, gpus: int, **more):
    return app_client.post(API, headers=bearer(token), json={
        "start": start.isoformat(timespec="minutes"), "hours": hours, "gpus": gpus, "host": "h1", **more})


def _refusal(r) -> tuple[int, str, str]:
    detail = r.json()["detail"]
    assert isinstance(detail, list), r.text
    return r.status_code, ".".join(str(p) for p in detail[0]["loc"]), detail[0]["msg"]


def _count(app_client, token: str) -> int:
    return app_client.get(API, headers=bearer(token)).json()["count"]


def test_a_users_limits_replace_the_defaults_and_a_groups_count_its_members_together(
        app_client, people, add_host, db_settings) -> None:
    add_host("h1", 8)
    admin, alice, bob = bearer(people.admin), people.names["alice"], people.names["bob"]
    start = _start()

    # Alice's own limit is stricter than the server's default (8 GPUs at once); Bob's longest booking is longer.
    r = app_client.put(f"/api/v1/users/{alice}/quota", headers=admin, json={"booking_max_gpus": 1})
    assert r.status_code == 200 and r.json()["booking_max_gpus"] == 1, r.text
    r = app_client.put(f"/api/v1/users/{bob}/quota", headers=admin,
                       json={"booking_max_hours": db_settings.booking_max_hours + 28})
    assert r.status_code == 200, r.text
    status, field, msg = _refusal(_book(app_client, people.alice, start, 2, 2))
    assert (status, field) == (422, "body.gpus") and "2 GPUs at once; the limit is 1" in msg
    longer = _book(app_client, people.bob, _soon(1), db_settings.booking_max_hours + 28, 1)
    assert longer.status_code == 201, longer.text
    quotas = {q["user"]: q for q in app_client.get("/api/v1/quotas", headers=bearer(people.vic)).json()["data"]}
    assert quotas[alice]["booking_max_gpus"] == 1 and quotas[alice]["booking_max_hours"] is None
    assert quotas[bob]["booking_max_hours"] == db_settings.booking_max_hours + 28

    # A group of both: 3 GPUs at once between them, and no booking further ahead than 1 day.
    group = "lab-" + alice.rsplit("-", 1)[-1]
    assert app_client.post("/api/v1/groups", headers=admin, json={"name": group}).status_code == 201
    for who in (alice, bob):
        assert app_client.post(f"/api/v1/groups/{group}/members/{who}", headers=admin).status_code == 200
    assert app_client.put(f"/api/v1/users/{alice}/quota", headers=admin, json={}).status_code == 200  # defaults
    r = app_client.put(f"/api/v1/groups/{group}/quota", headers=admin,
                       json={"booking_max_gpus": 3, "booking_max_ahead_days": 1})
    assert r.status_code == 200 and r.json()["quota"]["booking_max_gpus"] == 3, r.text

    # Bob holds 1 GPU over the window: Alice may take 2 more, not 3 (the group's, not her own 8).
    before = _count(app_client, people.admin)
    status, field, msg = _refusal(_book(app_client, people.alice, _soon(2), 2, 3))
    assert (status, field) == (422, "body.gpus"), msg
    assert f"group {group}'s bookings would hold 4 GPUs at once; its limit is 3" in msg
    assert _count(app_client, people.admin) == before  # nothing written
    two = _book(app_client, people.alice, _soon(2), 2, 2)
    assert two.status_code == 201, two.text
    status, field, msg = _refusal(_book(app_client, people.alice, _soon(2), 1, 1))
    assert (status, field) == (422, "body.gpus") and "its limit is 3" in msg
    # The group's furthest-ahead limit is stricter than the server's 28 days.
    status, field, msg = _refusal(_book(app_client, people.alice, _start(3), 1, 1))
    assert (status, field) == (422, "body.start") and f"1 days ahead for group {group}" in msg
    # Outside the group's limit once it is lifted; and an admin books for a member past all of them.
    assert app_client.put(f"/api/v1/groups/{group}/quota", headers=admin,
                          json={"booking_max_gpus": 3}).status_code == 200
    assert _book(app_client, people.alice, _start(3), 1, 1).status_code == 201
    past = _book(app_client, people.admin, _soon(2), 1, 4, owner=alice)
    assert past.status_code == 201, past.text
    groups = app_client.get("/api/v1/groups", headers=bearer(people.vic)).json()["data"]
    shown = next(x for x in groups if x["name"] == group)["quota"]
    assert shown["booking_max_gpus"] == 3 and shown["booking_max_ahead_days"] is None


def test_a_groups_weekly_booked_hours_count_every_member(app_client, people, add_host) -> None:
    add_host("h1", 8)
    admin, alice, bob = bearer(people.admin), people.names["alice"], people.names["bob"]
    group = "wk-" + alice.rsplit("-", 1)[-1]
    assert app_client.post("/api/v1/groups", headers=admin, json={"name": group}).status_code == 201
    for who in (alice, bob):
        assert app_client.post(f"/api/v1/groups/{group}/members/{who}", headers=admin).status_code == 200
    assert app_client.put(f"/api/v1/groups/{group}/quota", headers=admin,
                          json={"booking_hours_per_week": 10}).status_code == 200
    # Two bookings starting the same week (a Monday start keeps both in one week whatever today is).
    now = datetime.now(timezone.utc)
    monday = (now + timedelta(days=7 - now.weekday())).replace(hour=8, minute=0, second=0, microsecond=0)
    assert _book(app_client, people.bob, monday, 3, 2).status_code == 201  # 6 GPU-hours
    status, field, msg = _refusal(_book(app_client, people.alice, monday + timedelta(hours=5), 3, 2))
    assert (status, field) == (422, "body.end")
    assert f"group {group}'s bookings that week would hold 12 GPU-hours; its limit is 10" in msg
    assert _book(app_client, people.alice, monday + timedelta(hours=5), 2, 2).status_code == 201  # 10 in all
    # The next week is another week.
    assert _book(app_client, people.alice, monday + timedelta(days=7), 3, 2).status_code == 201


def test_bad_booking_limits_are_422s_and_nothing_changes(app_client, people) -> None:
    admin, alice = bearer(people.admin), people.names["alice"]
    for body, field in (({"booking_max_gpus": -1}, "booking_max_gpus"),
                        ({"booking_max_hours": 10_000}, "booking_max_hours"),
                        ({"booking_max_ahead_days": 400}, "booking_max_ahead_days"),
                        ({"booking_hours_per_week": -3}, "booking_hours_per_week")):
        r = app_client.put(f"/api/v1/users/{alice}/quota", headers=admin, json=body)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == field, r.text
    assert app_client.put(f"/api/v1/users/{alice}/quota", headers=bearer(people.alice),
                          json={"booking_max_gpus": 99}).status_code == 403
    assert alice not in {q["user"] for q in app_client.get("/api/v1/quotas", headers=admin).json()["data"]}
