"""What the browser's sign-in may do: writes only from the dashboard's own origin and only as JSON, no power that
outlasts the page without a second step, and the dashboard's own Content-Security-Policy."""

from __future__ import annotations

from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.api.security.headers import POLICY
from gpufleet.config import Settings
from support.people import People, bearer, browser_sign_in, build_app

HERE = {"Origin": "http://testserver"}


def test_a_cookie_write_from_the_same_site_but_another_origin_is_refused(client: TestClient, people: People) -> None:
    assert browser_sign_in(client, people.alice).status_code == 200
    # A notebook on another port of the same host name: the same site, so SameSite cookies ride along.
    for headers in ({"Origin": "http://testserver:8001", "Sec-Fetch-Site": "same-site"},
                    {"Sec-Fetch-Site": "same-site"}, {"Origin": "http://testserver:8001"}):
        refused = client.post("/api/v1/things", headers=headers)
        assert refused.status_code == 403 and "origin" in refused.json()["detail"], headers
    assert client.post("/api/v1/things", headers={**HERE, "Sec-Fetch-Site": "same-origin"}).status_code == 200
    assert client.app.state.created == [people.names["alice"]]


def test_a_cookie_write_must_be_json(client: TestClient, people: People) -> None:
    assert browser_sign_in(client, people.alice).status_code == 200
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = {**HERE, **({"Content-Type": kind} if kind else {})}
        refused = client.post("/api/v1/things/batch", content=b'{"items": [1]}', headers=headers)
        assert refused.status_code == 415 and "application/json" in refused.json()["detail"], kind
    assert client.app.state.created == []
    ok = client.post("/api/v1/things/batch", json={"items": [1]}, headers=HERE)
    assert ok.status_code == 200
    # A token is no browser's ambient credential: a script may send what it likes.
    client.cookies.clear()
    assert client.post("/api/v1/things/batch", content=b'{"items": [1]}', headers={
        **bearer(people.alice), "Content-Type": "text/plain"}).status_code in (200, 422)


def test_a_sign_in_link_needs_the_token_not_the_cookie(client: TestClient, people: People) -> None:
    assert browser_sign_in(client, people.admin).status_code == 200
    refused = client.post("/api/v1/auth/sign-in-link", headers=HERE)
    assert refused.status_code == 403 and "second step" in refused.json()["detail"]
    client.cookies.clear()
    made = client.post("/api/v1/auth/sign-in-link", headers=bearer(people.admin))
    assert made.status_code == 200 and "/api/v1/auth/link?code=" in made.json()["url"]


def test_the_dashboard_sends_its_own_policy(on_settings: Settings, people: People) -> None:
    with TestClient(create_app(on_settings)) as c:
        for path in ("/", "/sessions", "/api/v1/auth/whoami"):
            r = c.get(path, headers=bearer(people.alice))
            assert r.headers["content-security-policy"] == POLICY, path
        assert "frame-ancestors 'none'" in POLICY and "script-src 'self';" in POLICY
        # The API docs keep their own (Swagger UI needs an inline script).
        assert c.get("/docs").headers["content-security-policy"] != POLICY


def test_without_sign_in_a_program_may_upload_but_a_page_may_only_send_json(db_settings: Settings) -> None:
    local = db_settings.model_copy(update={"auth": "off"})
    with TestClient(build_app(local)) as c:
        # The CLI uploading a script's archive: no Origin, no Sec-Fetch-*; the implicit local admin.
        cli = c.post("/api/v1/things/batch", content=b'{"items": [1]}',
                     headers={"Content-Type": "application/octet-stream"})
        assert cli.status_code != 415, cli.text
        # A page on this machine's browser (its own origin even) posting a form gets the 415.
        form = c.post("/api/v1/things/batch", content=b"items=1",
                      headers={**HERE, "Content-Type": "application/x-www-form-urlencoded"})
        assert form.status_code == 415 and "application/json" in form.json()["detail"]
        assert c.app.state.created == []
