"""Webhooks go out only: a member cannot use one to reach, or read, what listens inside the network.

Real HTTP services on loopback stand for what only the server should reach: one
answers 403 with a secret body. A member cannot register a hook to it in any
spelling of its address; with the range allowed by an admin the hook works, and
its test shows the status code only, never the body. A name that resolves to
an inside address, an allowance removed after registration, and a redirect to
loopback are each refused at connection, and the inside service gets nothing.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from gpufleet.api.app import guarded_app
from gpufleet.api.routes import webhooks
from gpufleet.config import Settings
from gpufleet.db.notify import Webhook
from gpufleet.db.session import session_scope
from gpufleet.notify.outbound import Policy, literal
from support.people import SECRET, bearer, make_people

BODY = b"SECRET-internal-admin-panel-password=hunter2"


class Inside:
    """An HTTP service that only the server should reach: records each request, answers ``status`` with BODY."""

    def __init__(self, host: str = "127.0.0.1", status: int = 403, location: str | None = None) -> None:
        self.got: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                owner.got.append(self.path)
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", str(len(BODY)))
                self.end_headers()
                self.wfile.write(BODY)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def inside() -> Iterator[Inside]:
    svc = Inside()
    yield svc
    svc.close()


def _settings(db_settings: Settings, allowed: list[str]) -> Settings:
    return db_settings.model_copy(update={"auth": "on", "secret_key": SECRET, "webhook_allowed_networks": allowed})


def _client(settings: Settings) -> TestClient:
    return TestClient(guarded_app(settings, webhooks.router))


def _count(settings: Settings, owner: str) -> int:
    with session_scope(settings) as sess:
        return sess.execute(select(func.count()).select_from(Webhook).where(Webhook.owner == owner)).scalar_one()


def test_a_member_cannot_register_a_hook_to_an_inside_address_in_any_spelling(db_settings: Settings,
                                                                              inside: Inside) -> None:
    settings = _settings(db_settings, [])
    team = make_people(settings, suffix="-" + uuid.uuid4().hex[:6])
    p = inside.port
    urls = [f"http://127.0.0.1:{p}/", f"http://localhost:{p}/", f"http://LOCALHOST.:{p}/", f"http://a.localhost:{p}/",
            f"http://2130706433:{p}/", f"http://0x7f000001:{p}/", f"http://0177.0.0.1:{p}/", f"http://127.1:{p}/",
            f"http://[::1]:{p}/", f"http://[::ffff:127.0.0.1]:{p}/", f"http://[::ffff:7f00:1]:{p}/",
            "http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/", "http://10.0.0.8/",
            "http://192.168.1.1/", "http://172.16.0.1/", "http://100.64.0.1/", "http://0.0.0.0/",
            "http://224.0.0.1/", "http://240.0.0.1/", "http://[fe80::1]/", "http://[64:ff9b::7f00:1]/"]
    with _client(settings) as api:
        for url in urls:
            r = api.post("/api/v1/webhooks", headers=bearer(team.alice), json={"url": url})
            assert r.status_code == 422, (url, r.status_code, r.text)
            assert "GPUFLEET_WEBHOOK_ALLOWED_NETWORKS" in r.text or "loopback" in r.text, (url, r.text)
        # Changing a hook's URL to one is refused the same way.
        made = api.post("/api/v1/webhooks", headers=bearer(team.alice), json={"url": "https://hooks.example.org/x"})
        assert made.status_code == 201, made.text
        changed = api.patch(f"/api/v1/webhooks/{made.json()['id']}", headers=bearer(team.alice),
                            json={"url": f"http://2130706433:{p}/"})
        assert changed.status_code == 422 and "a loopback address" in changed.text, changed.text
    assert _count(settings, team.names["alice"]) == 1
    assert inside.got == []


def test_an_allowed_range_works_and_the_answers_body_never_comes_back(db_settings: Settings, inside: Inside) -> None:
    settings = _settings(db_settings, ["127.0.0.1/32"])
    team = make_people(settings, suffix="-" + uuid.uuid4().hex[:6])
    with _client(settings) as api:
        r = api.post("/api/v1/webhooks", headers=bearer(team.alice), json={"url": f"http://127.0.0.1:{inside.port}/x"})
        assert r.status_code == 201, r.text
        tested = api.post(f"/api/v1/webhooks/{r.json()['id']}/test", headers=bearer(team.alice))
    assert tested.status_code == 200, tested.text
    assert tested.json() == {"delivered": False, "error": "HTTP 403"}
    assert b"SECRET" not in tested.content and b"hunter2" not in tested.content
    assert inside.got == ["/x"]  # it was reached: the allowance is what let it through


def test_an_allowance_removed_later_is_enforced_at_connection(db_settings: Settings, inside: Inside) -> None:
    allowed = _settings(db_settings, ["127.0.0.0/8"])
    team = make_people(allowed, suffix="-" + uuid.uuid4().hex[:6])
    with _client(allowed) as api:
        r = api.post("/api/v1/webhooks", headers=bearer(team.alice), json={"url": f"http://127.0.0.1:{inside.port}/"})
        assert r.status_code == 201, r.text
    with _client(_settings(db_settings, [])) as api:
        tested = api.post(f"/api/v1/webhooks/{r.json()['id']}/test", headers=bearer(team.alice))
    assert tested.json()["delivered"] is False
    error = tested.json()["error"]
    assert "a loopback address" in error and "GPUFLEET_WEBHOOK_ALLOWED_NETWORKS" in error
    assert inside.got == []


def test_a_name_that_resolves_inside_is_refused_at_connection(db_settings: Settings) -> None:
    # This machine's own name: a DNS name (so registration cannot tell), resolved by the system's
    # resolver to this machine's loopback or private address, where the service listens on every address.
    name = socket.gethostname()
    resolved = {ipaddress.ip_address(i[4][0].split("%")[0])
                for i in socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)}
    assert resolved and not any(ip.is_global for ip in resolved), f"{name} resolves to a public address: {resolved}"
    svc = Inside(host="0.0.0.0")
    try:
        settings = _settings(db_settings, [])
        team = make_people(settings, suffix="-" + uuid.uuid4().hex[:6])
        with _client(settings) as api:
            r = api.post("/api/v1/webhooks", headers=bearer(team.alice), json={"url": f"http://{name}:{svc.port}/"})
            assert r.status_code == 201, r.text  # a name: checked when it is used, as it resolves then
            tested = api.post(f"/api/v1/webhooks/{r.json()['id']}/test", headers=bearer(team.alice)).json()
        assert tested["delivered"] is False and f"{name} resolves to" in tested["error"], tested
        assert svc.got == []
        # The same hook with the range allowed does reach the service: the name was the way in.
        allowed = _settings(db_settings, [f"{ip}/{ip.max_prefixlen}" for ip in resolved])
        with _client(allowed) as api:
            tested = api.post(f"/api/v1/webhooks/{r.json()['id']}/test", headers=bearer(team.alice)).json()
        assert tested == {"delivered": False, "error": "HTTP 403"} and svc.got == ["/"]
    finally:
        svc.close()


def test_a_redirect_to_loopback_is_not_followed(db_settings: Settings, inside: Inside) -> None:
    outside = Inside(host="127.0.0.2", status=302, location=f"http://127.0.0.1:{inside.port}/stolen")
    try:
        settings = _settings(db_settings, ["127.0.0.2/32"])  # the receiver's range only
        team = make_people(settings, suffix="-" + uuid.uuid4().hex[:6])
        with _client(settings) as api:
            r = api.post("/api/v1/webhooks", headers=bearer(team.alice),
                         json={"url": f"http://127.0.0.2:{outside.port}/hook"})
            assert r.status_code == 201, r.text
            tested = api.post(f"/api/v1/webhooks/{r.json()['id']}/test", headers=bearer(team.alice)).json()
        assert tested == {"delivered": False, "error": "HTTP 302"}
        assert outside.got == ["/hook"] and inside.got == []
    finally:
        outside.close()


def test_the_policy_reads_every_spelling() -> None:
    assert {str(literal(s)) for s in ("2130706433", "0x7f000001", "0177.0.0.1", "127.1", "127.0.0.1")} == {"127.0.0.1"}
    policy = Policy(["10.1.2.0/24"])
    assert policy.refusal(ipaddress.ip_address("10.1.2.9"), "10.1.2.9") is None
    assert "a private address" in (policy.refusal(ipaddress.ip_address("10.1.3.9"), "10.1.3.9") or "")
    assert "a cloud metadata address" in (policy.refusal(ipaddress.ip_address("169.254.169.254"), "x") or "")
    assert "a loopback address" in (policy.refusal(ipaddress.ip_address("::ffff:127.0.0.1"), "x") or "")
    assert policy.refusal(ipaddress.ip_address("93.184.215.14"), "example.org") is None
