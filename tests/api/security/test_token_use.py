"""A token's last-used time is recorded, and a busy embedded database never refuses a valid token."""

from __future__ import annotations

import threading

from fastapi.testclient import TestClient
from sqlalchemy import select, text

from support.people import People, bearer
from gpufleet.config import Settings
from gpufleet.db.models import APIToken, User
from gpufleet.db.session import get_engine, session_scope


def _last_used(settings: Settings, user: str):
    with session_scope(settings) as sess:
        return sess.scalar(
            select(APIToken.last_used_at).join(User, User.id == APIToken.user_id).where(User.name == user)
        )


def test_a_request_records_when_its_token_was_used(client: TestClient, on_settings: Settings, people: People) -> None:
    assert _last_used(on_settings, people.names["alice"]) is None
    assert client.get("/api/v1/auth/whoami", headers=bearer(people.alice)).status_code == 200
    assert _last_used(on_settings, people.names["alice"]) is not None


def _hold_write_lock(settings: Settings, held: threading.Event, release: threading.Event,
                     let_go: threading.Event) -> None:
    """What the agent (SQLite: the file's one writer) or a revoke (PostgreSQL: the token rows) holds."""
    with get_engine(settings.effective_database_url).connect() as conn:
        if settings.is_sqlite:
            conn.info["sqlite_begin"] = "BEGIN IMMEDIATE"
        with conn.begin():
            conn.execute(text("UPDATE users SET disabled = disabled"))
            if not settings.is_sqlite:
                conn.execute(text("SELECT id FROM api_tokens FOR UPDATE"))
            held.set()
            release.wait(30)
    let_go.set()


def test_a_token_works_while_another_writer_holds_a_lock(
    client: TestClient, on_settings: Settings, people: People
) -> None:
    held, release, let_go = threading.Event(), threading.Event(), threading.Event()
    t = threading.Thread(target=_hold_write_lock, args=(on_settings, held, release, let_go))
    t.start()
    assert held.wait(10)
    try:
        if on_settings.is_sqlite:
            # One writer at a time: the request waits for the lock, which ends soon.
            threading.Timer(0.5, release.set).start()
        # On PostgreSQL the lock is held until the answer came: the request must not wait for it.
        r = client.get("/api/v1/auth/whoami", headers=bearer(people.bob))
        if not on_settings.is_sqlite:
            assert not let_go.is_set(), "the request waited for another transaction's row lock"
    finally:
        release.set()
        t.join(30)
    assert r.status_code == 200, r.text
    assert r.json()["name"] == people.names["bob"]
