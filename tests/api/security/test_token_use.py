"""A token's last-used time is recorded, and a busy embedded database never refuses a valid token."""

from __future__ import annotations

import threading
import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from people import People, bearer
from gpufleet.config import Settings
from gpufleet.db.models import APIToken, User
from gpufleet.db.session import get_engine, session_scope


def _last_used(settings: Settings, user: str):  # noqa: ANN202
    with session_scope(settings) as sess:
        return sess.scalar(
            select(APIToken.last_used_at).join(User, User.id == APIToken.user_id).where(User.name == user)
        )


def test_a_request_records_when_its_token_was_used(client: TestClient, on_settings: Settings, people: People) -> None:
    assert _last_used(on_settings, people.names["alice"]) is None
    assert client.get("/api/v1/auth/whoami", headers=bearer(people.alice)).status_code == 200
    assert _last_used(on_settings, people.names["alice"]) is not None


def test_a_token_works_while_another_writer_holds_the_sqlite_lock(
    client: TestClient, on_settings: Settings, people: People
) -> None:
    if not on_settings.is_sqlite:
        pytest.skip("SQLite's single writer only; PostgreSQL has row locks")
    held, release = threading.Event(), threading.Event()

    def writer() -> None:
        # What the agent does every few seconds: a write transaction on the same file.
        with get_engine(on_settings.effective_database_url).connect() as conn:
            conn.info["sqlite_begin"] = "BEGIN IMMEDIATE"
            with conn.begin():
                conn.execute(text("UPDATE users SET disabled = disabled"))
                held.set()
                release.wait(10)

    t = threading.Thread(target=writer)
    t.start()
    assert held.wait(10)
    threading.Timer(0.5, release.set).start()
    t0 = time.monotonic()
    r = client.get("/api/v1/auth/whoami", headers=bearer(people.bob))
    t.join(10)
    assert r.status_code == 200, r.text
    assert r.json()["name"] == people.names["bob"]
    assert time.monotonic() - t0 < 10
