"""The notebooks' origin over HTTP: who gets in (a ticket, its cookie, a token), what reaches the notebook,
what comes back, and that the dashboard's own origin serves no notebook."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

import uuid

import httpx
from gpufleet.api.proxy.passes import APP_CSP, CONTENT_CSP
from support.people import People, bearer

from .conftest import ECHO, QUEUED, Jupyter, let_in, open_notebook


@contextmanager
def _signed_in(gpufleet: str, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gpufleet, timeout=60) as client:
        assert client.post("/api/v1/auth/sign-in", json={"token": token}).status_code == 200
        yield client


def test_the_owner_and_admins_reach_the_notebook_others_get_403(origin: str, jupyter: Jupyter,
                                                                 people: People) -> None:
    url = f"{origin}/sessions/{jupyter.session_id}/api/contents"
    assert httpx.get(url, headers=bearer(people.alice), timeout=60).status_code == 200
    assert httpx.get(url, headers=bearer(people.admin), timeout=60).status_code == 200
    for who in (people.bob, people.vic):
        refused = httpx.get(url, headers=bearer(who), timeout=60)
        assert refused.status_code == 403 and "owner and admins" in refused.json()["detail"]
    assert httpx.get(url, timeout=60).status_code == 403
    assert httpx.get(url, headers=bearer("not-a-token"), timeout=60).status_code == 403
    # Jupyter's own token is no way in: gpufleet replaces whatever Authorization the caller sends.
    assert httpx.get(url, headers={"Authorization": f"token {jupyter.token}"}, timeout=60).status_code == 403
    assert httpx.get(f"{url}?token={jupyter.token}", timeout=60).status_code == 403


def test_a_browser_gets_in_once_with_the_dashboards_ticket_and_never_with_its_cookie(
        gpufleet: str, origin: str, jupyter: Jupyter, people: People) -> None:
    sid = jupyter.session_id
    with _signed_in(gpufleet, people.alice) as alice:
        # The dashboard's cookie is host-only, but ports share cookies: the origin sees it, and ignores it.
        dashboard_cookie = f"gpufleet_session={alice.cookies['gpufleet_session']}"
        assert httpx.get(f"{origin}/sessions/{sid}/api/contents", headers={"Cookie": dashboard_cookie},
                         timeout=60).status_code == 403
        link = open_notebook(alice, gpufleet, sid)
        assert link.startswith(f"{origin}/sessions/{sid}/?gpufleet_ticket=")
        first = alice.get(link, follow_redirects=False)
        assert first.status_code == 303 and first.headers["location"] == f"/sessions/{sid}/"
        cookie = first.headers["set-cookie"]
        assert f"gpufleet_nb_{sid.replace('-', '')}=" in cookie and "HttpOnly" in cookie
        assert "SameSite=strict" in cookie and "Domain" not in cookie
        # Once only: a link left in a history or a log opens nothing.
        assert httpx.get(link, timeout=60).status_code == 403
        page = alice.get(f"{origin}/sessions/{sid}/")
        assert page.status_code == 200 and jupyter.token not in page.text
        assert page.headers["content-security-policy"] == APP_CSP
        # A ticket for one session opens no other; the notebook's cookie is this session's alone.
        assert httpx.get(link.replace(sid, ECHO), timeout=60).status_code == 403
    with _signed_in(gpufleet, people.bob) as bob:
        refused = bob.post(f"/api/v1/sessions/{sid}/open", headers={"Origin": gpufleet})
        assert refused.status_code == 403
    # The API's own listener serves no notebook: a page there could use the dashboard's cookie.
    elsewhere = httpx.get(f"{gpufleet}/sessions/{sid}/api/contents", headers=bearer(people.alice), timeout=60)
    assert elsewhere.status_code == 404 and "origin of its own" in elsewhere.json()["detail"]


def test_files_go_up_and_down_with_the_notebooks_cookie(gpufleet: str, origin: str, jupyter: Jupyter,
                                                       people: People) -> None:
    base = f"{origin}/sessions/{jupyter.session_id}"
    with _signed_in(gpufleet, people.alice) as alice:
        cookie = {"Cookie": let_in(alice, gpufleet, jupyter.session_id)}
    with httpx.Client(timeout=60, headers=cookie) as browser:
        redirect = browser.get(base)
        assert redirect.status_code == 307 and redirect.headers["location"] == f"/sessions/{jupyter.session_id}/"
        content = "x" * (3 * 1024 * 1024)  # past the API's body limit: a notebook saves big files
        put = browser.put(f"{base}/api/contents/big.html", headers={"Origin": origin},
                          json={"type": "file", "format": "text", "content": content})
        assert put.status_code == 201, put.text
        got = browser.get(f"{base}/api/contents/big.html", params={"content": "1"})
        assert got.status_code == 200 and got.json()["content"] == content
        # A member's file is served in a sandbox (an origin of nothing), whatever her server says.
        raw = browser.get(f"{base}/files/big.html")
        assert raw.status_code == 200 and raw.headers["content-security-policy"] == CONTENT_CSP
        assert browser.delete(f"{base}/api/contents/big.html", headers={"Origin": origin}).status_code == 204
        # A page elsewhere (the dashboard's origin included) cannot ride on the notebook's cookie.
        for elsewhere in ("http://evil.example", gpufleet):
            assert browser.post(f"{base}/api/kernels", json={}, headers={"Origin": elsewhere}).status_code == 403
        assert browser.post(f"{base}/api/kernels", json={}, headers={"Origin": origin,
                                                                      "Sec-Fetch-Site": "same-site"}).status_code == 403


def test_what_reaches_the_notebook_and_what_comes_back(gpufleet: str, origin: str, people: People) -> None:
    with _signed_in(gpufleet, people.alice) as alice:
        dashboard = f"gpufleet_session={alice.cookies['gpufleet_session']}"
        mine = let_in(alice, gpufleet, ECHO)
    r = httpx.post(f"{origin}/sessions/{ECHO}/api/x?y=1", content=b"z" * 200_000, timeout=60,
                   headers={"Origin": origin, "X-Forwarded-For": "10.9.9.9", "X-Custom": "kept",
                            "Cookie": f"{dashboard}; {mine}; _xsrf=notebook-own"})
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
    # no Domain reaching other host names).
    assert r.headers["content-security-policy"] == APP_CSP
    assert r.headers.get_list("set-cookie") == ["nb=1; Path=/", "wide=1; Path=/"]
    moved = httpx.get(f"{origin}/sessions/{ECHO}/redirect", headers={"Cookie": mine}, timeout=60)
    assert moved.status_code == 302 and moved.headers["location"] == f"/sessions/{ECHO}/tree"


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
