"""The notebook proxy over HTTP: who gets in, what reaches the notebook, what comes back."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

import uuid

import httpx
from support.people import People, bearer

from .conftest import ECHO, QUEUED, Jupyter


@contextmanager
def _signed_in(gpufleet: str, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gpufleet, timeout=60) as client:
        assert client.post("/api/v1/auth/sign-in", json={"token": token}).status_code == 200
        yield client


def test_the_owner_and_admins_reach_the_notebook_others_get_403(gpufleet: str, jupyter: Jupyter,
                                                                 people: People) -> None:
    url = f"{gpufleet}/sessions/{jupyter.session_id}/api/contents"
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


def test_files_go_up_and_down_through_the_proxy_with_the_browser_session(gpufleet: str, jupyter: Jupyter,
                                                                         people: People) -> None:
    base = f"/sessions/{jupyter.session_id}"
    with _signed_in(gpufleet, people.alice) as alice:
        redirect = alice.get(base)
        assert redirect.status_code == 307 and redirect.headers["location"] == f"{base}/"
        page = alice.get(f"{base}/")
        assert page.status_code == 200 and jupyter.token not in page.text
        content = "x" * (3 * 1024 * 1024)  # past the API's body limit: a notebook saves big files
        put = alice.put(f"{base}/api/contents/big.txt", json={"type": "file", "format": "text", "content": content},
                        headers={"Origin": gpufleet})
        assert put.status_code == 201, put.text
        got = alice.get(f"{base}/api/contents/big.txt", params={"content": "1"})
        assert got.status_code == 200 and got.json()["content"] == content
        assert alice.delete(f"{base}/api/contents/big.txt", headers={"Origin": gpufleet}).status_code == 204
        # A page on another site cannot ride on alice's cookie to change her notebook.
        forged = alice.post(f"{base}/api/kernels", json={}, headers={"Origin": "http://evil.example"})
        assert forged.status_code == 403
    with _signed_in(gpufleet, people.bob) as bob:
        assert bob.get(f"{base}/api/contents").status_code == 403


def test_what_reaches_the_notebook_and_what_comes_back(gpufleet: str, people: People) -> None:
    with _signed_in(gpufleet, people.alice) as alice:
        alice.cookies.set("_xsrf", "notebook-own")
        r = alice.post(f"/sessions/{ECHO}/api/x?y=1", content=b"z" * 200_000,
                       headers={"Origin": gpufleet, "X-Forwarded-For": "10.9.9.9", "X-Custom": "kept"})
        assert r.status_code == 200
        seen = r.json()
        headers = dict(seen["headers"])
        assert seen["method"] == "POST" and seen["path"] == f"/sessions/{ECHO}/api/x" and seen["query"] == "y=1"
        assert seen["body_size"] == 200_000
        assert seen["authorization_sha256"] == hashlib.sha256(b"token echo-token").hexdigest()
        assert headers["authorization"] == "token 0000000000"  # and blanked out of the answer
        assert "gpufleet_session" not in headers.get("cookie", "") and "_xsrf=notebook-own" in headers["cookie"]
        assert headers["origin"].startswith("http://127.0.0.1:") and headers["x-custom"] == "kept"
        assert "x-forwarded-for" not in headers
        assert "nb=1" in r.headers["set-cookie"]
        # A redirect to the notebook's own address comes back as a path on gpufleet.
        moved = alice.get(f"/sessions/{ECHO}/redirect")
        assert moved.status_code == 302 and moved.headers["location"] == f"/sessions/{ECHO}/tree"


def test_a_session_without_a_running_notebook_or_no_session(gpufleet: str, people: People) -> None:
    queued = httpx.get(f"{gpufleet}/sessions/{QUEUED}/", headers=bearer(people.alice), timeout=60)
    assert queued.status_code == 409 and "queued" in queued.json()["detail"]
    assert httpx.get(f"{gpufleet}/sessions/{uuid.uuid4()}/", headers=bearer(people.alice), timeout=60).status_code == 404
    assert httpx.get(f"{gpufleet}/sessions/{QUEUED}/", headers=bearer(people.bob), timeout=60).status_code == 403
    assert httpx.get(f"{gpufleet}/sessions/{QUEUED}/", timeout=60).status_code == 403


def test_the_dashboards_own_pages_under_sessions_are_not_notebooks(gpufleet: str) -> None:
    # /sessions/new is the dashboard's form (its fallback page, or its 404 when the dashboard is not built).
    for path in ("/sessions/new", "/sessions"):
        r = httpx.get(gpufleet + path, timeout=60)
        assert r.status_code != 403 and "notebook" not in r.text
