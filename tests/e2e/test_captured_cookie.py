"""A cookie captured on another port of the host signs nothing in.

Cookies are not separated by port, and any member can listen on a loopback
port: a page she wrote can point an admin's browser at her listener, which
then receives the admin's session cookie. This test does exactly that in
headless Chromium, against a real `gpufleet serve` with sign-in on, and then
replays what the listener received the way she would from her shell: it must
answer 401 for reads, writes and the live stream alike. The dashboard itself,
which holds its page key in its own origin's storage, keeps working; and even
with the cookie and the key together, a power that outlasts the page (a new
token) still needs the admin's token re-entered.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from support.servers import cli, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A member's plain HTTP listener: it keeps every header the browser sends it."""

    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:
        type(self).seen.append({k.lower(): v for k, v in self.headers.items()})
        body = b"<html><body>nothing to see</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def member_listener() -> Iterator[tuple[str, list[dict[str, str]]]]:
    _Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", _Recorder.seen
    finally:
        server.shutdown()
        server.server_close()


def _admin(srv) -> tuple[str, str]:
    """An admin made with the CLI on the running server, and a token for it."""
    name = f"ana{free_port()}"
    cli(srv.data_dir, "users", "add", name, "--role", "admin")
    return name, cli(srv.data_dir, "tokens", "create", name).strip().splitlines()[-1].strip()


def test_an_admins_cookie_captured_by_a_members_listener_signs_nothing_in(
    browser, auth_server, member_listener,
) -> None:
    srv, _ = auth_server
    listener, seen = member_listener
    admin, admin_token = _admin(srv)
    ctx = browser.new_context(base_url=srv.url, viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    page.set_default_timeout(20_000)
    try:
        page.goto("/")
        page.get_by_role("dialog", name="Sign in").wait_for()
        page.get_by_label("Token").fill(admin_token)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_function("document.querySelectorAll(\"[data-testid^='gpu-card-']\").length === 4",
                               timeout=60_000)
        # The live stream opens with a ticket the page asked for: no cookie opens one.
        page.wait_for_selector(".live-open", timeout=30_000)

        # A page points the admin's browser at the member's listener on another port of the same host.
        page.goto(listener)
        assert seen, "the listener got no request"
        captured = next((h["cookie"] for h in seen if "gpufleet_session" in h.get("cookie", "")), None)
        assert captured, f"the browser sent no session cookie to another port (the attack's premise): {seen}"
        assert not any("x-gpufleet-key" in h for h in seen), "the page key reached another origin"

        # Replayed from her shell, as `curl` would, with every header a browser would send written in.
        forged = {"Cookie": captured, "Origin": srv.url, "Sec-Fetch-Site": "same-origin",
                  "Content-Type": "application/json"}
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            for method, path, body in (("GET", "/api/v1/auth/whoami", None), ("GET", "/api/v1/trainings", None),
                                       ("POST", "/api/v1/tokens", {"user": admin, "name": "stolen"}),
                                       ("POST", "/api/v1/users", {"name": "mallory", "role": "admin"}),
                                       ("POST", "/api/v1/auth/ws-ticket", None),
                                       ("POST", "/api/v1/auth/download-ticket", {"path": "/api/v1/trainings/x"})):
                r = c.request(method, path, json=body, headers=forged)
                assert r.status_code == 401, (method, path, r.status_code, r.text)
            assert "page key" in c.get("/api/v1/auth/whoami", headers=forged).json()["detail"]
            # Nor with a page key made up, or one of another session (alice's, signed in beside).
            assert c.get("/api/v1/auth/whoami", headers={**forged, "X-Gpufleet-Key": "0" * 64}).status_code == 401
            other = c.post("/api/v1/auth/sign-in", json={"token": auth_server[1]}).json()["page_key"]
            assert c.get("/api/v1/auth/whoami", headers={**forged, "X-Gpufleet-Key": other}).status_code == 401
        ws_url = srv.url.replace("http://", "ws://") + "/api/v1/ws"
        with pytest.raises(InvalidStatus) as refused:
            with connect(ws_url, additional_headers={"Cookie": captured, "Origin": srv.url}, open_timeout=30):
                pass
        assert refused.value.response.status_code == 403

        # The dashboard, holding its key in its own storage, still works after a reload.
        page.goto("/")
        page.wait_for_function("document.querySelectorAll(\"[data-testid^='gpu-card-']\").length === 4",
                               timeout=60_000)
        me = page.evaluate("""fetch('/api/v1/auth/whoami',
            {headers: {'X-Gpufleet-Key': localStorage.getItem('gpufleet-page-key')}}).then(r => r.json())""")
        assert me["role"] == "admin" and me["via"] == "session"
        assert admin_token not in page.evaluate("JSON.stringify(localStorage) + document.cookie")
        # With the cookie and the key, a token (a power that outlasts the page) still needs the second step.
        made = page.evaluate("""fetch('/api/v1/tokens', {method: 'POST', headers: {'Content-Type': 'application/json',
            'X-Gpufleet-Key': localStorage.getItem('gpufleet-page-key')}, body: JSON.stringify({user: '%s'})})
            .then(async r => ({status: r.status, body: await r.json()}))""" % admin)
        assert made["status"] == 403 and "second step" in made["body"]["detail"], made
    finally:
        ctx.close()
