"""The notebooks' origin over HTTP: who gets in (a ticket, its cookie, a token), what reaches the notebook,
what comes back, and that the dashboard's own origin serves no notebook."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

import uuid

import httpx
from gpufleet.api.proxy.answers import APP_CSP, CONTENT_CSP
from gpufleet.config import Settings
from support.people import People, bearer, browser_sign_in

from .conftest import ECHO, QUEUED, Jupyter, let_in, open_notebook


@contextmanager
def _signed_in(gpufleet: str, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gpufleet, timeout=60) as client:
        assert browser_sign_in(client, token).status_code == 200
        yield client


def test_the_owner_reaches_the_notebook_others_and_admins_without_joining_get_403(origin: str, jupyter: Jupyter,
                                                                                   people: People) -> None:
    url = f"{origin}/sessions/{jupyter.session_id}/api/contents"
    assert httpx.get(url, headers=bearer(people.alice), timeout=60).status_code == 200
    for who in (people.admin, people.bob, people.vic):
        refused = httpx.get(url, headers=bearer(who), timeout=60)
        assert refused.status_code == 403 and "only to its owner" in refused.json()["detail"]
    assert httpx.get(url, timeout=60).status_code == 403
    assert httpx.get(url, headers=bearer("not-a-token"), timeout=60).status_code == 403
    # Jupyter's own token is no way in: gpufleet replaces whatever Authorization the caller sends.
    assert httpx.get(url, headers={"Authorization": f"token {jupyter.token}"}, timeout=60).status_code == 403
    assert httpx.get(f"{url}?token={jupyter.token}", timeout=60).status_code == 403


def test_a_browser_gets_in_once_with_the_dashboards_ticket_and_never_with_its_cookie_alone(
        gpufleet: str, origin: str, jupyter: Jupyter, people: People, proxy_settings: Settings) -> None:
    sid = jupyter.session_id
    base = f"{origin}/sessions/{sid}"
    with _signed_in(gpufleet, people.alice) as alice:
        # The dashboard's cookie is host-only, but ports share cookies: the origin sees it, and ignores it.
        dashboard_cookie = f"gpufleet_session={alice.cookies['gpufleet_session']}"
        assert httpx.get(f"{base}/api/contents", headers={"Cookie": dashboard_cookie}, timeout=60).status_code == 403
        link = open_notebook(alice, gpufleet, sid)
        assert link.startswith(f"{base}/?gpufleet_ticket=")
        first = alice.get(link, follow_redirects=False)
        assert first.status_code == 200, first.text
        cookie = first.headers["set-cookie"]
        assert f"gpufleet_nb_{sid.replace('-', '')}=" in cookie and "HttpOnly" in cookie
        # One host name for all notebooks here: the cookie goes with this notebook's requests alone.
        assert "SameSite=Strict" in cookie and "Domain" not in cookie and f"Path=/sessions/{sid}/" in cookie
        assert jupyter.token not in first.text and first.headers["cache-control"] == "no-store"
        # Once only: a link left in a history or a log opens nothing, and neither does it as a page load.
        assert httpx.get(link, timeout=60).status_code == 403
        # A ticket for one session opens no other.
        assert httpx.get(link.replace(sid, ECHO), timeout=60).status_code == 403
    opened = let_in(httpx.Client(timeout=60, cookies=alice.cookies, headers=alice.headers), gpufleet, sid,
                    proxy_settings, jupyter.token)
    with httpx.Client(timeout=60) as browser:
        # The cookie alone: the notebook's API refuses (forwarded as no one), writes are refused here...
        alone = {"Cookie": opened.cookie}
        assert browser.get(f"{base}/api/contents", headers=alone).status_code == 403
        assert browser.post(f"{base}/api/kernels", json={}, headers={**alone, "Origin": origin}).status_code == 403
        # ... a page load goes back to the dashboard it came from for a fresh ticket ...
        back = browser.get(f"{base}/api/contents", headers={**alone, "Sec-Fetch-Mode": "navigate"})
        assert back.status_code == 303 and back.headers["location"] == f"{gpufleet}/sessions?open={sid}"
        # ... and a static file (what any local account reaches at the notebook's port) is served.
        assert browser.get(f"{base}/static/favicons/favicon.ico", headers=alone).status_code == 200
        # With the page's key, the notebook's own page is in; a made-up key is not.
        assert browser.get(f"{base}/api/contents", headers=opened.headers()).status_code == 200
        wrong = {"Cookie": opened.cookie, "Authorization": "token " + "x" * len(opened.key)}
        assert browser.get(f"{base}/api/contents", headers=wrong).status_code == 403
        # The key alone is nothing.
        assert browser.get(f"{base}/api/contents", headers={"Authorization": f"token {opened.key}"}).status_code == 403
    with _signed_in(gpufleet, people.bob) as bob:
        refused = bob.post(f"/api/v1/sessions/{sid}/open", headers={"Origin": gpufleet})
        assert refused.status_code == 403
    # The API's own listener serves no notebook: a page there could use the dashboard's cookie.
    elsewhere = httpx.get(f"{gpufleet}/sessions/{sid}/api/contents", headers=bearer(people.alice), timeout=60)
    assert elsewhere.status_code == 404 and "origin of its own" in elsewhere.json()["detail"]


def test_an_admin_opens_another_members_notebook_only_by_joining_it(gpufleet: str, jupyter: Jupyter,
                                                                  people: People) -> None:
    # (The join itself, recorded on the session's row, is driven in tests/e2e/test_notebook_lab.py.)
    sid = jupyter.session_id
    with _signed_in(gpufleet, people.admin) as admin:
        refused = admin.post(f"/api/v1/sessions/{sid}/open", headers={"Origin": gpufleet})
        assert refused.status_code == 403 and "joining it" in refused.json()["detail"]
    with _signed_in(gpufleet, people.bob) as bob:  # a member may not join
        assert bob.post(f"/api/v1/sessions/{sid}/join", headers={"Origin": gpufleet}).status_code == 403


def test_files_go_up_and_down_with_the_notebooks_pass(gpufleet: str, origin: str, jupyter: Jupyter,
                                                      people: People, proxy_settings: Settings) -> None:
    base = f"{origin}/sessions/{jupyter.session_id}"
    with _signed_in(gpufleet, people.alice) as alice:
        opened = let_in(alice, gpufleet, jupyter.session_id, proxy_settings, jupyter.token)
    here = opened.headers(origin)
    with httpx.Client(timeout=60) as browser:
        redirect = browser.get(base)
        assert redirect.status_code == 307 and redirect.headers["location"] == f"/sessions/{jupyter.session_id}/"
        content = "x" * (3 * 1024 * 1024)  # past the API's body limit: a notebook saves big files
        put = browser.put(f"{base}/api/contents/big.html", headers=here,
                          json={"type": "file", "format": "text", "content": content})
        assert put.status_code == 201, put.text
        got = browser.get(f"{base}/api/contents/big.html", params={"content": "1"}, headers=opened.headers())
        assert got.status_code == 200 and got.json()["content"] == content
        # A member's file is served in a sandbox (an origin of nothing), whatever her server says.
        raw = browser.get(f"{base}/files/big.html", headers=opened.headers())
        assert raw.status_code == 200 and raw.headers["content-security-policy"] == CONTENT_CSP
        assert browser.delete(f"{base}/api/contents/big.html", headers=here).status_code == 204
        # A page elsewhere (the dashboard's origin included) cannot ride on the notebook's pass.
        for elsewhere in ("http://evil.example", gpufleet):
            assert browser.post(f"{base}/api/kernels", json={},
                                headers=opened.headers(elsewhere)).status_code == 403
        assert browser.post(f"{base}/api/kernels", json={}, headers={**here, "Sec-Fetch-Site": "same-site"}
                            ).status_code == 403


def test_what_reaches_the_notebook_and_what_comes_back(gpufleet: str, origin: str, people: People,
                                                       proxy_settings: Settings) -> None:
    with _signed_in(gpufleet, people.alice) as alice:
        dashboard = f"gpufleet_session={alice.cookies['gpufleet_session']}"
        mine = let_in(alice, gpufleet, ECHO, proxy_settings, "echo-token")
    r = httpx.post(f"{origin}/sessions/{ECHO}/api/x?y=1&token={mine.key}", content=b"z" * 200_000, timeout=60,
                   headers={"Origin": origin, "X-Forwarded-For": "10.9.9.9", "X-Custom": "kept",
                            "Cookie": f"{dashboard}; {mine.cookie}; _xsrf=notebook-own"})
    assert r.status_code == 200, r.text
    seen = r.json()
    headers = dict(seen["headers"])
    assert seen["method"] == "POST" and seen["path"] == f"/sessions/{ECHO}/api/x" and seen["query"] == "y=1"
    assert seen["body_size"] == 200_000
    assert seen["authorization_sha256"] == hashlib.sha256(b"token echo-token").hexdigest()
    assert headers["authorization"] == "token 0000000000"  # and blanked out of the answer
    # Neither the dashboard's cookie nor the notebook origin's own reaches the notebook; its own cookies do.
    assert headers["cookie"] == "_xsrf=notebook-own"
    assert headers["origin"].startswith("http://127.0.0.1:") and headers["x-custom"] == "kept"
    assert "x-forwarded-for" not in headers
    # The notebook's own policy is replaced by gpufleet's; its cookies stay its own (no gpufleet name,
    # no Domain reaching other host names, never Jupyter's login cookie).
    assert r.headers["content-security-policy"] == APP_CSP
    assert r.headers.get_list("set-cookie") == ["nb=1; Path=/", "wide=1; Path=/"]
    moved = httpx.get(f"{origin}/sessions/{ECHO}/redirect", headers=mine.headers(), timeout=60)
    assert moved.status_code == 302 and moved.headers["location"] == f"/sessions/{ECHO}/tree"
    # Forwarded as no one (the cookie alone): no token, and none of the browser's cookies.
    anonymous = httpx.get(f"{origin}/sessions/{ECHO}/api/x", timeout=60,
                          headers={"Cookie": f"{mine.cookie}; _xsrf=notebook-own"}).json()
    assert "authorization" not in dict(anonymous["headers"]) and "cookie" not in dict(anonymous["headers"])


def test_a_session_without_a_running_notebook_or_no_session(gpufleet: str, origin: str, people: People) -> None:
    queued = httpx.get(f"{origin}/sessions/{QUEUED}/", headers=bearer(people.alice), timeout=60)
    assert queued.status_code == 409 and "queued" in queued.json()["detail"]
    assert httpx.get(f"{origin}/sessions/{uuid.uuid4()}/", headers=bearer(people.alice), timeout=60).status_code == 404
    assert httpx.get(f"{origin}/sessions/{QUEUED}/", headers=bearer(people.bob), timeout=60).status_code == 403
    assert httpx.get(f"{origin}/sessions/{QUEUED}/", timeout=60).status_code == 403
    opened = httpx.post(f"{gpufleet}/api/v1/sessions/{QUEUED}/open", headers=bearer(people.alice), timeout=60)
    assert opened.status_code == 409 and "not running" in opened.json()["detail"]
    # The origin serves notebooks and nothing else: not the API, not the dashboard.
    assert httpx.get(f"{origin}/api/v1/auth/whoami", headers=bearer(people.alice), timeout=60).status_code == 404


def test_the_dashboards_own_pages_under_sessions_are_not_notebooks(gpufleet: str) -> None:
    # /sessions/new is the dashboard's form (its fallback page, or its 404 when the dashboard is not built).
    for path in ("/sessions/new", "/sessions"):
        r = httpx.get(gpufleet + path, timeout=60)
        assert r.status_code != 403 and "notebook" not in r.text
