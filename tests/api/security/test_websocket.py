"""WebSocket authentication: Origin check, bearer header, tickets, cookies — never a token in the URL."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from gpufleet.config import Settings
from gpufleet.db.session import upgrade_database
from support.people import People, bearer, browser_sign_in, build_app, ws_refused
from starlette.websockets import WebSocketDisconnect


def test_no_credentials_is_closed(client: TestClient, people: People) -> None:
    assert ws_refused(client, "/api/v1/ws") == 1008


def test_a_long_lived_token_in_the_url_or_header_is_not_enough(client: TestClient, people: People) -> None:
    assert ws_refused(client, f"/api/v1/ws?ticket={people.alice}") == 1008
    assert ws_refused(client, f"/api/v1/ws?token={people.alice}") == 1008


def test_a_bearer_header_opens_a_socket_and_a_bad_one_is_closed(client: TestClient, people: People) -> None:
    # What a script's WebSocket client sends: a header stays out of the proxy's access log, a URL does not.
    with client.websocket_connect("/api/v1/ws", headers=bearer(people.alice)) as ws:
        assert ws.receive_json() == {"user": people.names["alice"]}
    assert ws_refused(client, "/api/v1/ws", bearer(people.alice + "x")) == 1008
    assert ws_refused(client, "/api/v1/ws", {"Authorization": f"Token {people.alice}"}) == 1008


def test_ticket_opens_one_socket_once(client: TestClient, people: People) -> None:
    r = client.post("/api/v1/auth/ws-ticket", headers=bearer(people.alice))
    assert r.status_code == 200
    body = r.json()
    assert body["url"] == "/api/v1/ws" and body["expires_in_s"] == 30
    with client.websocket_connect(f"/api/v1/ws?ticket={body['ticket']}") as ws:
        assert ws.receive_json() == {"user": people.names["alice"]}
    # Single use: a ticket that leaked into a log is worth nothing.
    assert ws_refused(client, f"/api/v1/ws?ticket={body['ticket']}") == 1008


def test_ticket_cannot_be_used_as_a_session_cookie(client: TestClient, people: People) -> None:
    ticket = client.post("/api/v1/auth/ws-ticket", headers=bearer(people.alice)).json()["ticket"]
    client.cookies.set("gpufleet_session", ticket)
    assert client.get("/api/v1/auth/whoami").status_code == 401


def test_the_session_cookie_alone_never_opens_a_socket_a_ticket_it_asked_for_does(
    client: TestClient, people: People,
) -> None:
    browser_sign_in(client, people.bob)
    # A WebSocket carries the cookie, never the page key: the cookie alone (any Origin a program writes) is refused.
    assert ws_refused(client, "/api/v1/ws", {"Origin": "http://testserver"}) == 1008
    ticket = client.post("/api/v1/auth/ws-ticket", headers={"Origin": "http://testserver"}).json()["ticket"]
    with client.websocket_connect(f"/api/v1/ws?ticket={ticket}", headers={"Origin": "http://testserver"}) as ws:
        assert ws.receive_json() == {"user": people.names["bob"]}


def test_foreign_origin_is_closed_even_with_a_valid_session(client: TestClient, people: People) -> None:
    browser_sign_in(client, people.bob)
    assert ws_refused(client, "/api/v1/ws", {"Origin": "https://evil.example"}) == 1008
    ticket = client.post("/api/v1/auth/ws-ticket", headers=bearer(people.bob)).json()["ticket"]
    assert ws_refused(client, f"/api/v1/ws?ticket={ticket}", {"Origin": "https://evil.example"}) == 1008


def test_configured_origin_is_allowed(on_settings: Settings, people: People) -> None:
    settings = on_settings.model_copy(update={"cors_origins": ["https://dash.example.org"]})
    with TestClient(build_app(settings)) as client:
        browser_sign_in(client, people.vic, headers={"Origin": "https://dash.example.org"})
        ticket = client.post("/api/v1/auth/ws-ticket", headers={"Origin": "https://dash.example.org"}).json()["ticket"]
        with client.websocket_connect(f"/api/v1/ws?ticket={ticket}",
                                      headers={"Origin": "https://dash.example.org"}) as ws:
            assert ws.receive_json() == {"user": people.names["vic"]}
        # CORS answers the configured origin only, with credentials.
        r = client.get("/api/v1/auth/whoami", headers={"Origin": "https://dash.example.org"})
        assert r.headers["access-control-allow-origin"] == "https://dash.example.org"
        assert r.headers["access-control-allow-credentials"] == "true"
        r = client.get("/api/v1/auth/whoami", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in r.headers
        # The configured origin's page may send the page key (a header its preflight must allow).
        pre = client.options("/api/v1/trainings", headers={
            "Origin": "https://dash.example.org", "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "x-gpufleet-key"})
        assert pre.status_code == 200 and "x-gpufleet-key" in pre.headers["access-control-allow-headers"].lower()


def test_no_cors_headers_unless_origins_are_configured(client: TestClient, people: People) -> None:
    r = client.get("/api/v1/auth/whoami", headers={**bearer(people.vic), "Origin": "https://evil.example"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def test_local_server_accepts_its_own_origin_and_refuses_others(settings: Settings) -> None:
    upgrade_database(settings)
    with TestClient(build_app(settings)) as client:
        with client.websocket_connect("/api/v1/ws") as ws:
            assert ws.receive_json() == {"user": "local"}
        # A page on another site is exactly what CORS does not stop for WebSockets.
        assert ws_refused(client, "/api/v1/ws", {"Origin": "http://evil.example"}) == 1008


def test_oversized_message_closes_the_socket(client: TestClient, people: People, on_settings: Settings) -> None:
    ticket = client.post("/api/v1/auth/ws-ticket", headers=bearer(people.alice)).json()["ticket"]
    with client.websocket_connect(f"/api/v1/ws?ticket={ticket}") as ws:
        ws.receive_json()
        ws.send_text("x" * 100)
        assert ws.receive_json() == {"echo": 100}
        ws.send_text("x" * (on_settings.max_ws_message_bytes + 1))
        with pytest.raises(WebSocketDisconnect) as exc:
            ws.receive_json()
        assert exc.value.code == 1009
