"""A burst of creations on a small connection pool: a fast 429 with Retry-After, never a 5xx.

The real app (`create_app`) under uvicorn on PostgreSQL, sign-in on, with a
pool of two connections; clients that honour Retry-After get every training
created exactly once.
"""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from gpufleet.api.app import create_app
from gpufleet.users.accounts import add_user
from gpufleet.users.tokens import create_token
from gpufleet.db.models import Training
from gpufleet.db.session import get_engine, session_scope
from sqlalchemy import func, select, update

from support.servers import serve_inprocess

from support.fleet import make_settings

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

SECRET = "burst-secret-" + "x" * 40
CONFIG = {"max_steps": 10, "global_batch_size": 16}


def _forget(settings, owner: str) -> None:
    """End this test's trainings: the session's database is shared, and its scheduler loops would place them."""
    with session_scope(settings) as sess:
        sess.execute(update(Training).where(Training.owner == owner, Training.status == "queued")
                     .values(status="cancelled"))


async def _burst(base: str, token: str, names: list[str]) -> list[tuple[str, int, str | None]]:
    seen: list[tuple[str, int, str | None]] = []

    async def create(client: httpx.AsyncClient, name: str) -> None:
        for _ in range(200):
            r = await client.post("/api/v1/trainings", json={"name": name, "recipe": "sae", "config": CONFIG})
            seen.append((name, r.status_code, r.headers.get("retry-after")))
            if r.status_code != 429:
                return
            await asyncio.sleep(float(r.headers["retry-after"]) * (0.5 + hash(name) % 100 / 100))

    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {token}"},
                                 timeout=120, limits=httpx.Limits(max_connections=len(names))) as client:
        await asyncio.gather(*(create(client, n) for n in names))
    return seen


def test_burst_beyond_capacity_gets_429_with_retry_after_and_every_create_lands_once(tmp_path, request):
    s = make_settings(tmp_path, "postgresql", request, auth="on", secret_key=SECRET,
                      db_pool_size=2, db_max_overflow=0, db_pool_timeout_s=2.0)
    get_engine.cache_clear()  # a pool of exactly this size
    user = f"burst-{uuid.uuid4().hex[:6]}"
    with session_scope(s) as sess:
        add_user(sess, user, "member")
        token = create_token(sess, user).secret
    try:
        with serve_inprocess(create_app(s)) as srv:
            base = srv.url
            names = [f"{user}-{i}" for i in range(60)]
            seen = asyncio.run(_burst(base, token, names))
    finally:
        get_engine.cache_clear()
    codes = [code for _, code, _ in seen]
    assert not [c for c in codes if c >= 500], codes
    assert set(codes) <= {201, 429}
    assert codes.count(201) == len(names)
    assert codes.count(429) > 0  # the burst was beyond capacity
    assert all(after == "1" for _, code, after in seen if code == 429)
    with session_scope(s) as sess:
        rows = dict(sess.execute(select(Training.name, func.count()).where(Training.owner == user)
                                 .group_by(Training.name)).all())
    assert rows == {n: 1 for n in names}
    _forget(s, user)


def test_a_create_needs_one_connection(tmp_path, request):
    s = make_settings(tmp_path, "postgresql", request, auth="on", secret_key=SECRET,
                      db_pool_size=1, db_max_overflow=0, db_pool_timeout_s=5.0, max_concurrent_requests=1)
    get_engine.cache_clear()
    user = f"one-{uuid.uuid4().hex[:6]}"
    with session_scope(s) as sess:
        add_user(sess, user, "member")
        token = create_token(sess, user).secret
    try:
        with serve_inprocess(create_app(s)) as srv:
            base = srv.url
            for i in range(3):
                r = httpx.post(f"{base}/api/v1/trainings",
                               json={"name": f"{user}-{i}", "recipe": "sae", "config": CONFIG},
                               headers={"Authorization": f"Bearer {token}"}, timeout=60)
                assert r.status_code == 201, r.text
            r = httpx.post(f"{base}/api/v1/trainings/{r.json()['id']}/cancel",
                           headers={"Authorization": f"Bearer {token}"}, timeout=60)
            assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
    finally:
        get_engine.cache_clear()
        _forget(s, user)
