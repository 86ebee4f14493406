"""Limits: creation rate and queued cap per user, body and page sizes."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient
from gpufleet.api.security.ratelimits import MemoryLimiter, RedisLimiter
from gpufleet.config import Settings
from gpufleet.db.models import Training
from gpufleet.db.session import session_scope
from support.people import People, bearer, build_app


def test_creation_rate_is_per_user(on_settings: Settings, people: People) -> None:
    settings = on_settings.model_copy(update={"create_rate_per_minute": 3})
    with TestClient(build_app(settings)) as client:
        for _ in range(3):
            assert client.post("/api/v1/things", headers=bearer(people.alice)).status_code == 200
        r = client.post("/api/v1/things", headers=bearer(people.alice))
        assert r.status_code == 429
        assert "GPUFLEET_CREATE_RATE_PER_MINUTE" in r.json()["detail"]
        assert 1 <= int(r.headers["retry-after"]) <= 60
        # Another user has their own budget.
        assert client.post("/api/v1/things", headers=bearer(people.bob)).status_code == 200
        assert client.app.state.created.count(people.names["alice"]) == 3


def test_queued_cap_per_user(on_settings: Settings, people: People) -> None:
    settings = on_settings.model_copy(update={"max_queued_per_user": 2})
    alice = people.names["alice"]
    with session_scope(settings) as sess:
        for i in range(2):
            sess.add(Training(name=f"t{i}", owner=alice, recipe="mlp", config={}, status="queued"))
        # Finished trainings do not count against the cap.
        sess.add(Training(name="done", owner=people.names["bob"], recipe="mlp", config={}, status="queued"))
    with TestClient(build_app(settings)) as client:
        r = client.post("/api/v1/things", headers=bearer(people.alice))
        assert r.status_code == 429
        assert "has 2 queued trainings" in r.json()["detail"] and "GPUFLEET_MAX_QUEUED_PER_USER" in r.json()["detail"]
        assert client.post("/api/v1/things", headers=bearer(people.bob)).status_code == 200
        with session_scope(settings) as sess:
            sess.add(Training(name="x", owner=alice, recipe="mlp", config={}, status="succeeded"))
        assert client.app.state.created == [people.names["bob"]]


@pytest.mark.redis
def test_redis_limiter_is_shared_between_processes(redis_url: str) -> None:
    # Two limiter objects stand in for two API processes: one budget.
    a, b = RedisLimiter(redis_url), RedisLimiter(redis_url)
    key = f"test:{uuid.uuid4().hex}"
    assert a.hit(key, 2, 60) is None
    assert b.hit(key, 2, 60) is None
    retry = a.hit(key, 2, 60)
    assert retry is not None and 0 < retry <= 60
    assert a.claim_once(key, 10) is True
    assert b.claim_once(key, 10) is False


def test_memory_limiter_window_slides() -> None:
    # The limiter's own clock, moved by hand: a real sleep would make this depend on the machine's speed.
    now = [1000.0]
    lim = MemoryLimiter(clock=lambda: now[0])
    assert lim.hit("k", 1, 60) is None
    now[0] += 59.9
    assert lim.hit("k", 1, 60) == pytest.approx(0.1)
    now[0] += 0.1
    assert lim.hit("k", 1, 60) is None


def test_request_body_over_the_limit_is_refused(client: TestClient, people: People, on_settings: Settings) -> None:
    big = b'{"a": "' + b"x" * on_settings.max_request_bytes + b'"}'
    r = client.post("/api/v1/echo", content=big, headers={**bearer(people.alice), "Content-Type": "application/json"})
    assert r.status_code == 413 and "GPUFLEET_MAX_REQUEST_BYTES" in r.json()["detail"]

    # Without a Content-Length (chunked), the body is counted as it arrives.
    def chunks():
        yield b'{"a": "'
        for _ in range(on_settings.max_request_bytes // 65536 + 1):
            yield b"x" * 65536
        yield b'"}'

    r = client.post("/api/v1/echo", content=chunks(),
                    headers={**bearer(people.alice), "Content-Type": "application/json"})
    assert r.status_code == 413
    ok = client.post("/api/v1/echo", json={"a": 1, "b": 2}, headers=bearer(people.alice))
    assert ok.status_code == 200 and ok.json() == {"keys": 2}


def test_pagination_is_bounded(client: TestClient, people: People) -> None:
    h = bearer(people.vic)
    assert client.get("/api/v1/page", headers=h).json() == {"limit": 50, "offset": 0}
    assert client.get("/api/v1/page?limit=500&offset=10", headers=h).json() == {"limit": 500, "offset": 10}
    for bad in ("limit=501", "limit=0", "offset=-1", "limit=abc"):
        assert client.get(f"/api/v1/page?{bad}", headers=h).status_code == 422, bad


def test_schema_declares_the_refusals(client: TestClient) -> None:
    paths = client.app.openapi()["paths"]
    create = paths["/api/v1/things"]["post"]["responses"]
    assert {"401", "403", "429"} <= set(create)
    # Any gated operation can meet admission's 429 (the server at capacity), but only
    # creates carry the per-user rate limit and the queued cap.
    drain_429 = paths["/api/v1/gpus/drain"]["post"]["responses"]["429"]["description"]
    assert "rate limit" not in drain_429 and "Retry-After" in drain_429
    assert "413" in paths["/api/v1/echo"]["post"]["responses"]
    sign_in = paths["/api/v1/auth/sign-in"]["post"]["responses"]
    assert {"401", "403", "429"} <= set(sign_in)
    assert "401" not in paths["/api/v1/auth/sign-out"]["post"]["responses"]


def test_a_batch_counts_its_items_against_the_cap(on_settings: Settings, people: People) -> None:
    settings = on_settings.model_copy(update={"max_queued_per_user": 3})
    with session_scope(settings) as sess:
        sess.add(Training(name="t", owner=people.names["alice"], recipe="mlp", config={}, status="queued"))
    with TestClient(build_app(settings)) as client:
        h = bearer(people.alice)
        r = client.post("/api/v1/things/batch", json={"items": [{}, {}, {}]}, headers=h)
        assert r.status_code == 429 and "this request adds 3" in r.json()["detail"]
        assert client.app.state.created == []
        r = client.post("/api/v1/things/batch", json={"items": [{}, {}]}, headers=h)
        assert r.status_code == 200 and r.json() == {"count": 2}


@pytest.mark.redis
def test_two_api_processes_share_one_creation_budget(on_settings: Settings, people: People, redis_url: str) -> None:
    # Two apps on one Redis stand in for two API processes behind a proxy.
    settings = on_settings.model_copy(update={"redis_url": redis_url, "create_rate_per_minute": 2})
    with TestClient(build_app(settings)) as a, TestClient(build_app(settings)) as b:
        h = bearer(people.bob)
        assert a.post("/api/v1/things", headers=h).status_code == 200
        assert b.post("/api/v1/things", headers=h).status_code == 200
        r = a.post("/api/v1/things", headers=h)
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert b.post("/api/v1/things", headers=h).status_code == 429
