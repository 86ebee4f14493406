"""`/api/v1/bookings` through the product's app and its auth: times in a zone, 422s naming the field, a 409
naming the booking in the way and the next free window, the limits a member books within."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from support.people import bearer

API = "/api/v1/bookings"


def _tomorrow(hour: int) -> datetime:
    day = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) + timedelta(days=2)
    return day.replace(hour=hour)


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="minutes")


def test_book_in_a_zone_conflict_names_the_booking_and_the_next_window(app_client, people, add_host) -> None:
    add_host("h1", 4)
    start = _tomorrow(10)
    berlin = start.astimezone(ZoneInfo("Europe/Berlin")).replace(tzinfo=None)  # a wall-clock time in Berlin
    r = app_client.post(API, headers=bearer(people.alice), json={
        "start": berlin.isoformat(timespec="minutes"), "hours": 2, "time_zone": "Europe/Berlin", "gpus": 4,
        "host": "h1", "reason": "paper deadline"})
    assert r.status_code == 201, r.text
    mine = r.json()
    assert mine["start"].startswith(start.strftime("%Y-%m-%dT%H:%M")) and mine["owner"] == people.names["alice"]
    assert mine["start_local"] == _iso(start.astimezone(ZoneInfo("Europe/Berlin")))
    assert sorted(g["index"] for g in mine["gpus"]) == [0, 1, 2, 3] and mine["state"] == "upcoming"

    r = app_client.post(API, headers=bearer(people.bob), json={
        "start": _iso(start + timedelta(hours=1)), "hours": 3, "gpus": 2, "host": "h1"})
    assert r.status_code == 409, r.text
    body = r.json()
    assert body["in_the_way"]["id"] == mine["id"] and body["in_the_way"]["owner"] == people.names["alice"]
    assert body["next_free"]["start"].startswith((start + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M"))
    assert mine["id"] in body["detail"]

    shown = app_client.get(f"{API}/{mine['id']}", params={"tz": "America/New_York"}, headers=bearer(people.bob))
    assert shown.json()["start_local"] == _iso(start.astimezone(ZoneInfo("America/New_York")))
    free = app_client.get("/api/v1/free-window", params={"gpus": 4, "hours": 1, "after": _iso(start)},
                          headers=bearer(people.bob))
    assert free.json()["window"]["start"].startswith((start + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M"))

    assert app_client.delete(f"{API}/{mine['id']}", headers=bearer(people.bob)).status_code == 403
    gone = app_client.delete(f"{API}/{mine['id']}", headers=bearer(people.alice))
    assert gone.status_code == 200 and gone.json()["state"] == "released"
    again = app_client.post(API, headers=bearer(people.bob), json={
        "start": _iso(start + timedelta(hours=1)), "hours": 3, "gpus": 2, "host": "h1"})
    assert again.status_code == 201, again.text


def _refused(app_client, token: str, **body) -> tuple[int, str]:
    r = app_client.post(API, headers=bearer(token), json={"gpus": 1, "host": "h1", **body})
    detail = r.json()["detail"]
    return r.status_code, (".".join(str(p) for p in detail[0]["loc"]) if isinstance(detail, list) else detail)


def test_bad_times_and_limits_are_422s_naming_the_field_and_nothing_is_written(app_client, people, add_host,
                                                                             db_settings) -> None:
    add_host("h1", 4)
    start = _tomorrow(10)
    past = datetime.now(timezone.utc) - timedelta(hours=1)
    ahead = datetime.now(timezone.utc) + timedelta(days=db_settings.booking_max_ahead_days + 2)
    cases = [
        ({"start": _iso(start), "end": _iso(start - timedelta(hours=1))}, "body.end"),
        ({"start": _iso(past), "hours": 2}, "body.start"),
        ({"start": _iso(ahead), "hours": 2}, "body.start"),
        ({"start": start.isoformat(timespec="seconds").replace(":00+", ":30+"), "hours": 1}, "body.start"),
        ({"start": "next tuesday", "hours": 1}, "body.start"),
        ({"start": _iso(start), "hours": 1, "time_zone": "Mars/Olympus"}, "body.time_zone"),
        ({"start": "2026-03-29T02:30", "hours": 1, "time_zone": "Europe/Berlin"}, "body.start"),  # skipped by DST
        ({"start": _iso(start), "hours": db_settings.booking_max_hours + 1}, "body.end"),
        ({"start": _iso(start), "hours": 1, "gpus": db_settings.booking_max_gpus + 1}, "body.gpus"),
        ({"start": _iso(start), "hours": 1, "host": "nowhere"}, "body.host"),
    ]
    for body, field in cases:
        assert _refused(app_client, people.alice, **body) == (422, field), body
    # What a member may not do at all, and what an admin may.
    assert _refused(app_client, people.alice, start=_iso(start), hours=1, kind="maintenance")[0] == 403
    assert _refused(app_client, people.alice, start=_iso(start), hours=1, owner=people.names["bob"])[0] == 403
    assert _refused(app_client, people.vic, start=_iso(start), hours=1)[0] == 403
    assert app_client.get(API, headers=bearer(people.alice)).json()["count"] == 0
    r = app_client.post(API, headers=bearer(people.admin), json={
        "start": _iso(start), "hours": db_settings.booking_max_hours + 1, "gpus": 4, "host": "h1",
        "kind": "maintenance", "reason": "new PSU"})
    assert r.status_code == 201, r.text
    listed = app_client.get(API, headers=bearer(people.vic)).json()
    assert [b["kind"] for b in listed["data"]] == ["maintenance"]


def test_a_booking_kept_across_a_daylight_saving_change_stays_at_its_instants(app_client, people, add_host) -> None:
    """Booked in New York's wall-clock time across the night the clocks go back: stored as instants, its length
    is the real one (25 h between two 09:00s), and read back in the zone it says the same wall-clock times."""
    add_host("h1", 1)
    # Far enough ahead only where the change is within the furthest-ahead limit: use the admin (no limit).
    r = app_client.post(API, headers=bearer(people.admin), json={
        "start": "2027-11-06T09:00", "end": "2027-11-07T09:00", "time_zone": "America/New_York", "gpus": 1,
        "host": "h1"})
    assert r.status_code == 201, r.text
    b = r.json()
    length = datetime.fromisoformat(b["end"]) - datetime.fromisoformat(b["start"])
    assert length == timedelta(hours=25)
    assert (b["start_local"], b["end_local"]) == ("2027-11-06T09:00-04:00", "2027-11-07T09:00-05:00")
