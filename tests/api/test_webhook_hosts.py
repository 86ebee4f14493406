"""A webhook's host is judged in the form it is reached by: normalised first (IDNA, UTS 46).

A host written with other digits and dots (full-width ``１２７．０．０．１``,
circled ``①②⑦.0.0.1``, the ideographic full stop ``127。0。0。1``) or
letters (``ＬｏｃａｌＨｏｓｔ``) is the loopback address once the resolver or the
HTTP client has mapped it. Such a hook is refused at create with a 422 that
says why; a host no mapping makes a name of is refused as not a host name. A
hook stored with one (by an earlier version) answers its test with a clear
failure, never a 500, and reaches nothing. With loopback allowed, the hook is
stored, and sent, in its ASCII form.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from gpufleet.api.app import guarded_app
from gpufleet.api.routes import webhooks
from gpufleet.config import Settings
from gpufleet.db.notify import Webhook
from gpufleet.db.session import session_scope
from support.people import SECRET, bearer, make_people

from api.test_webhook_outbound import Inside

# (host as written, what the refusal must say)
LOOPBACK = "a loopback address"
NOT_A_HOST = "is not a host name"
SPELLINGS = [("１２７．０．０．１", LOOPBACK), ("①②⑦.0.0.1", LOOPBACK), ("127。0。0。1", LOOPBACK),
             ("①②⑦。⓪。⓪。①", LOOPBACK), ("ＬｏｃａｌＨｏｓｔ", "loopback"), ("ⓛⓞⓒⓐⓛⓗⓞⓢⓣ", "loopback"),
             ("ａ.ＬＯＣＡＬＨＯＳＴ", "loopback"), ("１０．０．０．８", "a private address"),
             ("a..b", NOT_A_HOST), ("-bad-.example.org", NOT_A_HOST), ("exa%6dple.org", NOT_A_HOST),
             ("x" * 70 + ".example.org", NOT_A_HOST), ("\u200b.example.org", NOT_A_HOST)]


@pytest.fixture
def inside() -> Iterator[Inside]:
    svc = Inside()
    yield svc
    svc.close()


def _settings(db_settings: Settings, allowed: list[str]) -> Settings:
    return db_settings.model_copy(update={"auth": "on", "secret_key": SECRET, "webhook_allowed_networks": allowed})


def _count(settings: Settings, owner: str) -> int:
    with session_scope(settings) as sess:
        return sess.execute(select(func.count()).select_from(Webhook).where(Webhook.owner == owner)).scalar_one()


def test_a_host_in_other_digits_or_letters_is_refused_at_create_naming_why(db_settings: Settings,
                                                                          inside: Inside) -> None:
    settings = _settings(db_settings, [])
    team = make_people(settings, suffix="-" + uuid.uuid4().hex[:6])
    with TestClient(guarded_app(settings, webhooks.router)) as api:
        for host, why in SPELLINGS:
            url = f"http://{host}:{inside.port}/x"
            r = api.post("/api/v1/webhooks", headers=bearer(team.alice), json={"url": url})
            assert r.status_code == 422, (host, r.status_code, r.text)
            assert why in r.text, (host, r.text)
        made = api.post("/api/v1/webhooks", headers=bearer(team.alice), json={"url": "https://hooks.example.org/x"})
        assert made.status_code == 201, made.text
        for host, why in SPELLINGS:
            r = api.patch(f"/api/v1/webhooks/{made.json()['id']}", headers=bearer(team.alice),
                          json={"url": f"http://{host}:{inside.port}/"})
            assert r.status_code == 422 and why in r.text, (host, r.text)
        assert api.get(f"/api/v1/webhooks/{made.json()['id']}", headers=bearer(team.alice)).json()["url"] == \
            "https://hooks.example.org/x"
    assert _count(settings, team.names["alice"]) == 1
    assert inside.got == []


def test_a_stored_hook_with_such_a_host_answers_its_test_without_a_500_and_reaches_nothing(
        db_settings: Settings, inside: Inside) -> None:
    settings = _settings(db_settings, [])
    team = make_people(settings, suffix="-" + uuid.uuid4().hex[:6])
    owner = team.names["alice"]
    ids = []
    with session_scope(settings) as sess:  # as an earlier version stored them, unjudged
        for host, _ in SPELLINGS:
            hook = Webhook(owner=owner, url=f"http://{host}:{inside.port}/x", format="json", events=["test"],
                           secret="whsec_x", enabled=True)
            sess.add(hook)
            sess.flush()
            ids.append((host, hook.id))
    with TestClient(guarded_app(settings, webhooks.router), raise_server_exceptions=False) as api:
        for host, hook_id in ids:
            r = api.post(f"/api/v1/webhooks/{hook_id}/test", headers=bearer(team.alice))
            assert r.status_code == 200, (host, r.status_code, r.text)
            said = r.json()
            assert said["delivered"] is False and said["error"], (host, said)
            assert "loopback" in said["error"] or "private" in said["error"] or NOT_A_HOST in said["error"], \
                (host, said)
    assert inside.got == []


def test_an_allowed_host_is_stored_and_sent_in_the_form_that_was_judged(db_settings: Settings,
                                                                        inside: Inside) -> None:
    settings = _settings(db_settings, ["127.0.0.1/32"])
    team = make_people(settings, suffix="-" + uuid.uuid4().hex[:6])
    with TestClient(guarded_app(settings, webhooks.router)) as api:
        r = api.post("/api/v1/webhooks", headers=bearer(team.alice),
                     json={"url": f"http://１２７．０．０．１:{inside.port}/x?q=ü"})
        assert r.status_code == 201, r.text
        assert r.json()["url"] == f"http://127.0.0.1:{inside.port}/x?q=ü"
        tested = api.post(f"/api/v1/webhooks/{r.json()['id']}/test", headers=bearer(team.alice))
    assert tested.status_code == 200 and tested.json() == {"delivered": False, "error": "HTTP 403"}, tested.text
    assert inside.got == ["/x?q=%C3%BC"]
