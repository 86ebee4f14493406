"""Browser sessions end when they should: each cookie is a row that sign-out, revoking, disabling and rotating end."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from typer.testing import CliRunner

from gpufleet.api.security.signing import sign
from gpufleet.cli import app as cli_app
from gpufleet.config import Settings, get_settings, reset_settings_cache
from gpufleet.db.models import BrowserSession, User
from gpufleet.db.session import session_scope
from gpufleet.db.types import utcnow
from gpufleet.users.accounts import set_disabled
from gpufleet.users.tokens import create_token, revoke_token
from support.people import SECRET, People, browser_sign_in, build_app, ws_refused

COOKIE = "gpufleet_session"


def _signed_in(client: TestClient, token: str) -> str:
    client.cookies.clear()
    r = browser_sign_in(client, token)
    assert r.status_code == 200, r.text
    return client.cookies.get(COOKIE)


def _newest_row(sess, user_name: str) -> BrowserSession:
    return sess.scalars(select(BrowserSession).join(User, User.id == BrowserSession.user_id)
                        .where(User.name == user_name).order_by(BrowserSession.created_at.desc())).first()


def _whoami(client: TestClient, cookie: str):
    client.cookies.clear()
    client.cookies.set(COOKIE, cookie)
    return client.get("/api/v1/auth/whoami")


def test_sign_out_ends_the_session_on_the_server(client: TestClient, people: People) -> None:
    cookie = _signed_in(client, people.alice)
    assert _whoami(client, cookie).status_code == 200
    assert client.post("/api/v1/auth/sign-out").status_code == 200
    # A copy of the cookie (another tab, a stolen one) is refused too, not only forgotten by this browser.
    r = _whoami(client, cookie)
    assert r.status_code == 401 and "ended" in r.json()["detail"]


def test_revoking_the_token_ends_sessions_opened_with_it(client: TestClient, people: People,
                                                         on_settings: Settings) -> None:
    cookie = _signed_in(client, people.bob)
    with session_scope(on_settings) as sess:
        revoke_token(sess, people.bob[:10])
    r = _whoami(client, cookie)
    assert r.status_code == 401 and "revoked" in r.json()["detail"]


def test_disabling_the_user_ends_its_sessions_for_good(client: TestClient, people: People,
                                                       on_settings: Settings) -> None:
    cookie = _signed_in(client, people.vic)
    with session_scope(on_settings) as sess:
        set_disabled(sess, people.names["vic"])
    r = _whoami(client, cookie)
    assert r.status_code == 401 and "disabled" in r.json()["detail"]
    with session_scope(on_settings) as sess:
        set_disabled(sess, people.names["vic"], False)
    # Enabled again, the user signs in again: the old cookie stays dead.
    assert _whoami(client, cookie).status_code == 401
    assert _whoami(client, _signed_in(client, people.vic)).status_code == 200


def test_secret_rotate_ends_every_session(client: TestClient, people: People, on_settings: Settings,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    cookies = [_signed_in(client, people.admin), _signed_in(client, people.alice)]
    if on_settings.database_url:
        monkeypatch.setenv("GPUFLEET_DATABASE_URL", on_settings.database_url)
    monkeypatch.setenv("GPUFLEET_DATA_DIR", str(on_settings.data_dir))
    reset_settings_cache()
    r = CliRunner().invoke(cli_app, ["secret", "rotate"])
    assert r.exit_code == 0, r.output
    assert len(r.stdout.strip()) >= 64  # the new secret, alone on stdout
    for cookie in cookies:
        assert _whoami(client, cookie).status_code == 401
    # Tokens are not sessions: they keep working.
    assert client.get("/api/v1/auth/whoami", headers={"Authorization": f"Bearer {people.alice}"}).status_code == 200


def test_a_validly_signed_cookie_without_a_row_is_refused(client: TestClient, people: People,
                                                          on_settings: Settings) -> None:
    with session_scope(on_settings) as sess:
        admin_id = sess.scalar(select(User.id).where(User.name == people.names["admin"]))
    ten_years = 10 * 365 * 86400
    forged = [
        # What a stolen secret made before: an admin, tied to no token, for ten years.
        sign(SECRET, "session", {"u": str(admin_id), "t": None}, ten_years),
        # The current shape, naming a session that was never opened.
        sign(SECRET, "session", {"s": str(uuid.uuid4()), "k": "x" * 43}, ten_years),
    ]
    for cookie in forged:
        assert _whoami(client, cookie).status_code == 401
    # A real session's id with a made-up key: the row alone is not enough either.
    real = _signed_in(client, people.admin)
    with session_scope(on_settings) as sess:
        sid = _newest_row(sess, people.names["admin"]).id
    assert _whoami(client, real).status_code == 200
    assert _whoami(client, sign(SECRET, "session", {"s": str(sid), "k": "y" * 43}, 3600)).status_code == 401


def test_the_lifetime_is_capped_by_the_setting_and_the_token(on_settings: Settings, people: People) -> None:
    settings = on_settings.model_copy(update={"session_ttl_s": 600})
    with TestClient(build_app(settings)) as client:
        before = utcnow()
        r = browser_sign_in(client, people.alice)
        assert "Max-Age=600" in r.headers["set-cookie"]
        cookie = client.cookies.get(COOKIE)
        with session_scope(settings) as sess:
            row = _newest_row(sess, people.names["alice"])
            assert before + timedelta(seconds=599) <= row.expires_at <= utcnow() + timedelta(seconds=600)
            # Time passes: the server's expiry is what counts, whatever the browser keeps.
            sess.execute(update(BrowserSession).where(BrowserSession.id == row.id)
                         .values(expires_at=utcnow() - timedelta(seconds=1)))
        r = _whoami(client, cookie)
        assert r.status_code == 401 and "expired" in r.json()["detail"]
        # Rows of sessions long over go when the user signs in again.
        with session_scope(settings) as sess:
            sess.execute(update(BrowserSession).where(BrowserSession.id == row.id)
                         .values(expires_at=utcnow() - timedelta(days=2)))
        _signed_in(client, people.alice)
        with session_scope(settings) as sess:
            assert sess.get(BrowserSession, row.id) is None

    # A session never outlives the token it was opened with.
    with session_scope(on_settings) as sess:
        short = create_token(sess, people.names["bob"], "short", expires_days=1)
    long = on_settings.model_copy(update={"session_ttl_s": 30 * 86400})
    with TestClient(build_app(long)) as client:
        browser_sign_in(client, short.secret)
        with session_scope(on_settings) as sess:
            row = _newest_row(sess, people.names["bob"])
            assert abs((row.expires_at - short.expires_at).total_seconds()) < 1


def test_a_ticket_from_a_session_dies_with_it(client: TestClient, people: People) -> None:
    _signed_in(client, people.alice)
    ticket = client.post("/api/v1/auth/ws-ticket").json()["ticket"]
    assert client.post("/api/v1/auth/sign-out").status_code == 200
    assert ws_refused(client, f"/api/v1/ws?ticket={ticket}") == 1008


def test_a_cookie_costs_one_query_as_a_token_does(client: TestClient, people: People, on_settings: Settings) -> None:
    from sqlalchemy import event

    from gpufleet.db.session import engine_for

    _signed_in(client, people.alice)
    seen: list[str] = []

    def statement(_conn, _cursor, sql, *_args) -> None:
        seen.append(" ".join(sql.split()))

    engine = engine_for(on_settings)
    event.listen(engine, "before_cursor_execute", statement)
    try:
        assert client.get("/api/v1/auth/whoami").status_code == 200
    finally:
        event.remove(engine, "before_cursor_execute", statement)
    # SQLite's session opens with an explicit BEGIN; the check itself is one SELECT by primary key.
    queries = [q for q in seen if q != "BEGIN"]
    assert len(queries) == 1 and "FROM browser_sessions" in queries[0], seen


def test_secret_rotate_writes_the_secret_file_the_servers_read(client: TestClient, people: People,
                                                              on_settings: Settings, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    cookie = _signed_in(client, people.alice)
    if on_settings.database_url:
        monkeypatch.setenv("GPUFLEET_DATABASE_URL", on_settings.database_url)
    monkeypatch.setenv("GPUFLEET_DATA_DIR", str(on_settings.data_dir))
    secret_file = tmp_path / "secret_key"
    secret_file.write_text(SECRET + "\n")
    monkeypatch.setenv("GPUFLEET_SECRET_KEY_FILE", str(secret_file))
    monkeypatch.delenv("GPUFLEET_SECRET_KEY", raising=False)
    reset_settings_cache()
    r = CliRunner().invoke(cli_app, ["secret", "rotate"])
    assert r.exit_code == 0, r.output
    new = secret_file.read_text().strip()
    assert new != SECRET and len(new) >= 64
    assert new not in r.stdout  # written for the servers, not echoed to a terminal
    assert secret_file.stat().st_mode & 0o777 == 0o600
    reset_settings_cache()
    assert get_settings().secret_key == new  # what a restarted server reads
    assert _whoami(client, cookie).status_code == 401
    # A file that cannot be written changes nothing: sessions stay, and it says why.
    other = _signed_in(client, people.alice)
    r = CliRunner().invoke(cli_app, ["secret", "rotate", "--write", str(tmp_path / "missing" / "secret_key")])
    assert r.exit_code == 1 and "cannot write the new secret" in r.output
    assert _whoami(client, other).status_code == 200
