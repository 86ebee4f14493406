"""iCalendar feeds of bookings: a secret feed address that reads one feed and signs in nowhere, and its
RFC 5545 text parsed back."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import icalendar

from gpufleet.db.session import session_scope
from gpufleet.users.accounts import set_disabled
from gpufleet.users.groups import add_member, create_group, remove_member
from support.people import bearer

FEEDS = "/api/v1/booking-feeds"


def _start(hours: int) -> str:
    day = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) + timedelta(days=2)
    return (day.replace(hour=hours)).isoformat(timespec="minutes")


def _feed(app_client, token: str, group: str | None = None) -> dict:
    r = app_client.post(FEEDS, headers=bearer(token), json={"group": group} if group else {})
    assert r.status_code == 201, r.text
    return r.json()


def _probe(app_client, method: str, path: str, headers: dict, params: dict):
    return app_client.request(method, path, headers=headers, params=params,
                              json={} if method in {"POST", "PUT", "PATCH"} else None)


def test_the_feed_token_is_refused_on_every_other_route(app_client, people) -> None:
    """The attack: a feed address leaks (calendar apps share and sync it) and its token is tried as a sign-in.
    On every route but the feed itself, as a bearer header, a cookie or a query parameter, it gets exactly what
    no credential at all gets; and the sign-in route refuses it."""
    token = _feed(app_client, people.alice)["token"]
    tried = 0
    for template, ops in app_client.app.openapi()["paths"].items():  # every route the server answers
        if template == "/api/v1/bookings.ics":
            continue
        path = re.sub(r"\{[^}]+\}", "00000000-0000-0000-0000-000000000001", template)
        for method in sorted(m.upper() for m in ops if m in {"get", "post", "put", "patch", "delete"}):
            bare = _probe(app_client, method, path, {}, {})
            armed = _probe(app_client, method, path,
                           {"Authorization": f"Bearer {token}", "Cookie": f"gpufleet_session={token}"},
                           {"feed": token, "token": token})
            said = f"{method} {template}: {armed.status_code} {armed.text[:200]}"
            assert armed.status_code == bare.status_code, said
            if bare.status_code == 401:
                tried += 1
    assert tried > 50  # most routes need a sign-in, and the feed token gave none of them one
    assert app_client.post("/api/v1/auth/sign-in", json={"token": token}).status_code == 401


def test_a_feed_is_valid_icalendar_of_ones_own_and_a_teams_bookings_and_rotation_ends_the_old(
        app_client, people, add_host, on_settings) -> None:
    add_host("h1", 4)
    alice, bob = people.names["alice"], people.names["bob"]
    with session_scope(on_settings) as sess:
        create_group(sess, f"vision{alice[5:]}")
        add_member(sess, f"vision{alice[5:]}", alice)
        add_member(sess, f"vision{alice[5:]}", bob)
    team = f"vision{alice[5:]}"
    long_reason = "course lab: " + "ünïcode and a long note, with commas; " * 4
    made = app_client.post("/api/v1/bookings", headers=bearer(people.alice), json={
        "start": _start(10), "hours": 2, "gpus": 2, "host": "h1", "reason": long_reason})
    assert made.status_code == 201, made.text
    assert app_client.post("/api/v1/bookings", headers=bearer(people.bob), json={
        "start": _start(14), "hours": 1, "gpus": 1, "host": "h1"}).status_code == 201

    own = _feed(app_client, people.alice)
    assert own["url"].endswith(f"/api/v1/bookings.ics?feed={own['token']}")
    r = app_client.get(own["url"])
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/calendar")
    raw = r.content
    assert raw.endswith(b"\r\n") and b"\n" not in raw.replace(b"\r\n", b"")
    assert all(len(line) <= 75 for line in raw.split(b"\r\n"))
    assert any(line.startswith(b" ") for line in raw.split(b"\r\n"))  # the long note was folded
    cal = icalendar.Calendar.from_ical(raw)
    events = cal.walk("VEVENT")
    assert [str(e["UID"]) for e in events] == [f"{made.json()['id']}@testserver"]
    ev = events[0]
    assert ev["DTSTART"].dt == datetime.fromisoformat(made.json()["start"])
    assert ev["DTSTART"].to_ical().endswith(b"Z") and ev["DTEND"].to_ical().endswith(b"Z") and "DTSTAMP" in ev
    assert str(ev["SUMMARY"]) == f"{alice}: 2 GPUs on h1 GPU 0,1" and str(ev["DESCRIPTION"]) == long_reason

    shared = _feed(app_client, people.bob, team)
    events = icalendar.Calendar.from_ical(app_client.get(shared["url"]).content).walk("VEVENT")
    assert sorted(str(e["SUMMARY"]).split(":")[0] for e in events) == sorted([alice, bob])

    assert app_client.post(FEEDS, headers=bearer(people.vic), json={"group": team}).status_code == 403
    rotated = _feed(app_client, people.alice)
    assert app_client.get(own["url"]).status_code == 404
    assert app_client.get(rotated["url"]).status_code == 200
    assert app_client.get("/api/v1/bookings.ics", params={"feed": "gfcal_guessed"}).status_code == 404


def test_a_feed_ends_when_its_owner_is_disabled_or_leaves_the_team(app_client, people, add_host, on_settings) -> None:
    """The attack: a member copies a team's feed address, then is removed from the team (or disabled) and keeps
    reading who books what. A feed reads only as long as its owner may ask for it anew."""
    add_host("h1", 2)
    alice, bob = people.names["alice"], people.names["bob"]
    team = f"nlp{alice[5:]}"
    with session_scope(on_settings) as sess:
        create_group(sess, team)
        add_member(sess, team, alice)
        add_member(sess, team, bob)
    assert app_client.post("/api/v1/bookings", headers=bearer(people.alice), json={
        "start": _start(10), "hours": 1, "gpus": 1, "host": "h1"}).status_code == 201
    shared = _feed(app_client, people.bob, team)
    own = _feed(app_client, people.bob)
    assert app_client.get(shared["url"]).status_code == 200
    with session_scope(on_settings) as sess:
        remove_member(sess, team, bob)
    assert app_client.get(shared["url"]).status_code == 404
    assert app_client.get(own["url"]).status_code == 200
    with session_scope(on_settings) as sess:
        set_disabled(sess, bob)
    assert app_client.get(own["url"]).status_code == 404
