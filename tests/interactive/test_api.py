"""The sessions API without a worker: create, list, show, stop, extend, limits; refusals write nothing."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from gpufleet.db.session import session_scope
from gpufleet.users.accounts import set_permission
from support.people import People, bearer

pytestmark = pytest.mark.parametrize("db_settings", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
                                     indirect=True)


def _grant(settings, name: str) -> None:
    with session_scope(settings) as sess:
        set_permission(sess, name, "run_code", True)
        sess.commit()


def _count(c: TestClient, token: str, owner: str) -> int:
    r = c.get("/api/v1/sessions", params={"owner": owner, "status": ["queued", "stopped"]}, headers=bearer(token))
    assert r.status_code == 200, r.text
    return r.json()["total"]


def test_a_session_is_queued_shown_extended_and_stopped_by_its_owner_only(
        app_client: TestClient, people: People, on_settings) -> None:
    alice = people.names["alice"]
    _grant(on_settings, alice)
    r = app_client.post("/api/v1/sessions", json={"gpus": 1, "hours": 2, "jupyter": True}, headers=bearer(people.alice))
    assert r.status_code == 201, r.text
    s = r.json()
    assert (s["owner"], s["mode"], s["status"], s["hours"], s["gpus"], s["url"]) == (alice, "jupyter", "queued", 2.0,
                                                                                       1, None)
    sid = s["id"]
    shown = app_client.get(f"/api/v1/sessions/{sid}", headers=bearer(people.vic)).json()
    assert shown["id"] == sid and shown["training_status"] == "queued"
    # The session is work in the queue: a trainings row of kind session.
    t = app_client.get(f"/api/v1/trainings/{sid}", headers=bearer(people.alice)).json()
    assert t["status"] == "queued"
    assert app_client.post(f"/api/v1/sessions/{sid}/stop", headers=bearer(people.bob)).status_code == 403
    assert app_client.post(f"/api/v1/sessions/{sid}/extend", json={"hours": 1},
                           headers=bearer(people.bob)).status_code == 403
    r = app_client.post(f"/api/v1/sessions/{sid}/extend", json={"hours": 1}, headers=bearer(people.alice))
    assert r.status_code == 200 and r.json()["hours"] == 3.0, r.text
    # Past the maximum (8h here): refused, naming what is left, and nothing changes.
    r = app_client.post(f"/api/v1/sessions/{sid}/extend", json={"hours": 6}, headers=bearer(people.alice))
    assert r.status_code == 422 and "at most 5 more" in r.json()["detail"], r.text
    assert app_client.get(f"/api/v1/sessions/{sid}", headers=bearer(people.alice)).json()["hours"] == 3.0
    r = app_client.post(f"/api/v1/sessions/{sid}/stop", headers=bearer(people.alice))
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["end_reason"]) == ("stopped", "user")
    r = app_client.post(f"/api/v1/sessions/{sid}/extend", json={"hours": 1}, headers=bearer(people.alice))
    assert r.status_code == 409, r.text


def test_bad_requests_are_refused_and_write_nothing(app_client: TestClient, people: People, on_settings) -> None:
    alice = people.names["alice"]
    assert app_client.post("/api/v1/sessions", json={"gpus": 1}, headers=bearer(people.alice)).status_code == 403
    _grant(on_settings, alice)
    for body, code, says in (
        ({"gpus": 0}, 422, "gpus"),
        ({"gpus": 1, "hours": 9}, 422, "at most 8 hours"),
        ({"gpus": 1, "hours": -1}, 422, "hours"),
        ({"gpus": 1, "host": "no-such-host"}, 404, "not known"),
        ({"gpus": 1, "colour": "red"}, 422, "colour"),
        ({"gpus": 1, "priority": 5}, 403, "priority 5"),
    ):
        r = app_client.post("/api/v1/sessions", json=body, headers=bearer(people.alice))
        assert r.status_code == code and says in r.text, (body, r.text)
    assert app_client.post("/api/v1/sessions", json={"gpus": 1}, headers=bearer(people.vic)).status_code == 403
    assert _count(app_client, people.alice, alice) == 0
    assert app_client.get("/api/v1/sessions/00000000-0000-0000-0000-000000000000",
                          headers=bearer(people.alice)).status_code == 404


def test_an_admin_sets_a_users_maximum_length(app_client: TestClient, people: People, on_settings) -> None:
    alice = people.names["alice"]
    _grant(on_settings, alice)
    r = app_client.put(f"/api/v1/sessions/limits/user/{alice}", json={"max_hours": 20}, headers=bearer(people.alice))
    assert r.status_code == 403
    r = app_client.put(f"/api/v1/sessions/limits/user/{alice}", json={"max_hours": 20}, headers=bearer(people.admin))
    assert r.status_code == 200 and r.json()["max_hours"] == 20, r.text
    assert app_client.put("/api/v1/sessions/limits/user/nobody-x", json={"max_hours": 2},
                          headers=bearer(people.admin)).status_code == 404
    r = app_client.post("/api/v1/sessions", json={"gpus": 1, "hours": 12}, headers=bearer(people.alice))
    assert r.status_code == 201, r.text
    r = app_client.post("/api/v1/sessions", json={"gpus": 1, "hours": 21}, headers=bearer(people.alice))
    assert r.status_code == 422 and f"set for user {alice}" in r.json()["detail"], r.text


def test_a_stopped_session_comes_back_only_for_a_member_who_may_run_code(
        app_client: TestClient, people: People, on_settings) -> None:
    # A session runs her own code as a script does (gpufleet.workkinds: runs_member_code), so the trainings'
    # resume, which puts an ended row back in the queue, asks for run_code for it too.
    alice = people.names["alice"]
    _grant(on_settings, alice)
    sid = app_client.post("/api/v1/sessions", json={"gpus": 1, "hours": 2}, headers=bearer(people.alice)).json()["id"]
    assert app_client.post(f"/api/v1/sessions/{sid}/stop", headers=bearer(people.alice)).status_code == 200
    with session_scope(on_settings) as sess:
        set_permission(sess, alice, "run_code", False)
        sess.commit()
    r = app_client.post(f"/api/v1/trainings/{sid}/resume", headers=bearer(people.alice))
    assert r.status_code == 403 and "run_code" in r.json()["detail"], r.text
    assert app_client.get(f"/api/v1/sessions/{sid}", headers=bearer(people.alice)).json()["status"] == "stopped"
