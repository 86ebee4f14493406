"""Roles, ownership and sign-in on the real auth layer (SQLite and PostgreSQL)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from gpufleet.users.accounts import set_disabled
from gpufleet.users.tokens import revoke_token
from gpufleet.db.session import session_scope
from support.people import People, bearer, browser_sign_in


def test_without_a_token_mutations_and_reads_are_refused(client: TestClient, people: People) -> None:
    r = client.post("/api/v1/things")
    assert r.status_code == 401
    assert "Bearer" in r.json()["detail"] and r.headers["www-authenticate"] == "Bearer"
    # A route that declares no user is still closed by the gate.
    assert client.get("/api/v1/open-read").status_code == 401
    assert client.post("/api/v1/gpus/drain").status_code == 401
    # The Prometheus exposition too: scrape it with a viewer's token.
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=bearer(people.vic)).status_code == 200
    assert client.app.state.created == []


def test_bad_tokens_are_refused_with_a_reason(client: TestClient, people: People) -> None:
    cases = {
        "Basic abc": "must be 'Bearer <token>'",
        "Bearer nonsense": "malformed",
        "Bearer gf_" + "A" * 43: "not known",
    }
    for header, reason in cases.items():
        r = client.post("/api/v1/things", headers={"Authorization": header})
        assert r.status_code == 401, header
        assert reason in r.json()["detail"]
    assert client.app.state.created == []


def test_member_creates_and_cancels_only_their_own(client: TestClient, people: People) -> None:
    alice, bob = people.names["alice"], people.names["bob"]
    r = client.post("/api/v1/things", headers=bearer(people.alice))
    assert r.status_code == 200 and r.json() == {"owner": alice}
    assert client.post(f"/api/v1/things/{alice}/cancel", headers=bearer(people.alice)).status_code == 200
    r = client.post(f"/api/v1/things/{alice}/cancel", headers=bearer(people.bob))
    assert r.status_code == 403
    assert f"belongs to {alice!r}" in r.json()["detail"]
    # Members may not drain GPUs.
    r = client.post("/api/v1/gpus/drain", headers=bearer(people.bob))
    assert r.status_code == 403 and "only an admin" in r.json()["detail"]
    assert client.app.state.created == [alice]
    assert bob not in client.app.state.created


def test_admin_cancels_any_and_drains(client: TestClient, people: People) -> None:
    alice = people.names["alice"]
    r = client.post(f"/api/v1/things/{alice}/cancel", headers=bearer(people.admin))
    assert r.status_code == 200 and r.json()["cancelled_by"] == people.names["admin"]
    assert client.post("/api/v1/gpus/drain", headers=bearer(people.admin)).status_code == 200


def test_viewer_reads_but_cannot_create_or_cancel(client: TestClient, people: People) -> None:
    assert client.get("/api/v1/open-read", headers=bearer(people.vic)).status_code == 200
    r = client.post("/api/v1/things", headers=bearer(people.vic))
    assert r.status_code == 403 and "viewer role" in r.json()["detail"]
    r = client.post(f"/api/v1/things/{people.names['vic']}/cancel", headers=bearer(people.vic))
    assert r.status_code == 403
    assert client.app.state.created == []


def test_revoked_token_and_disabled_user_stop_working(client: TestClient, people: People, on_settings) -> None:
    assert client.get("/api/v1/auth/whoami", headers=bearer(people.alice)).status_code == 200
    with session_scope(on_settings) as sess:
        revoke_token(sess, people.alice[:10])
        set_disabled(sess, people.names["bob"])
    r = client.get("/api/v1/auth/whoami", headers=bearer(people.alice))
    assert r.status_code == 401 and "revoked" in r.json()["detail"]
    r = client.get("/api/v1/auth/whoami", headers=bearer(people.bob))
    assert r.status_code == 401 and "disabled" in r.json()["detail"]


def test_dashboard_sign_in_sets_an_http_only_cookie(client: TestClient, people: People) -> None:
    r = browser_sign_in(client, people.alice)
    assert r.status_code == 200
    answer = r.json()
    key = answer.pop("page_key")
    assert answer == {"name": people.names["alice"], "role": "member", "via": "session", "auth_required": True}
    cookie = r.headers["set-cookie"]
    assert "gpufleet_session=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    # The cookie carries no token, and neither it nor the answer's page key is the token.
    assert people.alice not in cookie and key and key != people.alice and key not in cookie
    # The cookie authenticates beside its page key only.
    bare = client.get("/api/v1/auth/whoami", headers={"X-Gpufleet-Key": ""})
    assert bare.status_code == 401 and "page key" in bare.json()["detail"]
    who = client.get("/api/v1/auth/whoami").json()
    assert who["name"] == people.names["alice"] and who["via"] == "session"
    assert client.post("/api/v1/things").json() == {"owner": people.names["alice"]}
    assert client.post("/api/v1/auth/sign-out").status_code == 200
    assert client.get("/api/v1/auth/whoami").status_code == 401


def test_sign_in_with_a_bad_token_sets_nothing(client: TestClient, people: People) -> None:
    r = browser_sign_in(client, "gf_" + "B" * 43)
    assert r.status_code == 401 and "not known" in r.json()["detail"]
    assert "set-cookie" not in r.headers
    assert client.post("/api/v1/auth/sign-in", json={}).status_code == 422


def test_revoking_the_token_ends_its_sessions(client: TestClient, people: People, on_settings) -> None:
    assert browser_sign_in(client, people.bob).status_code == 200
    assert client.get("/api/v1/auth/whoami").status_code == 200
    with session_scope(on_settings) as sess:
        revoke_token(sess, people.bob[:10])
    r = client.get("/api/v1/auth/whoami")
    assert r.status_code == 401 and "revoked" in r.json()["detail"]


def test_forged_or_altered_cookie_is_refused(client: TestClient, people: People) -> None:
    browser_sign_in(client, people.vic)
    good = client.cookies.get("gpufleet_session")
    head, payload, sig = good.split(".")
    client.cookies.clear()
    # Swap in a payload naming another user: the signature no longer matches.
    for bad in (f"{head}.{payload[:-2]}AA.{sig}", f"{head}.{payload}.{'A' * len(sig)}", "v1.e30.xyz"):
        client.cookies.set("gpufleet_session", bad)
        r = client.get("/api/v1/auth/whoami")
        assert r.status_code == 401, bad


def test_cookie_mutation_from_a_foreign_origin_is_refused(client: TestClient, people: People) -> None:
    browser_sign_in(client, people.alice)
    r = client.post("/api/v1/things", headers={"Origin": "https://evil.example"})
    assert r.status_code == 403 and "Origin" in r.json()["detail"]
    r = client.post("/api/v1/things", headers={"Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403
    # The dashboard's own origin (same host) is fine.
    assert client.post("/api/v1/things", headers={"Origin": "http://testserver"}).status_code == 200
    assert client.app.state.created == [people.names["alice"]]


def test_sign_in_from_a_foreign_origin_is_refused(client: TestClient, people: People) -> None:
    r = browser_sign_in(client, people.alice, headers={"Origin": "https://evil.example"})
    assert r.status_code == 403 and "set-cookie" not in r.headers
    r = browser_sign_in(client, people.alice, headers={"Origin": "http://testserver"})
    assert r.status_code == 200 and "gpufleet_session=" in r.headers["set-cookie"]


def test_session_cookie_is_secure_over_https(on_settings, people: People) -> None:
    from support.people import build_app

    with TestClient(build_app(on_settings), base_url="https://testserver") as c:
        r = browser_sign_in(c, people.alice)
        assert r.status_code == 200 and "Secure" in r.headers["set-cookie"]
