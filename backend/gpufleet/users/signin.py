"""Sign-in sessions: the rows behind the dashboard's cookies (a browser signed in; not an interactive session).

A session is opened when a browser signs in (with an API token, or another
way such as a one-time link) and lives at most ``GPUFLEET_SESSION_TTL_S``, and
never longer than the token it was opened with. Its cookie names the row and
carries a random key of which only the SHA-256 is stored. A cookie counts only
while its row is live: not ended (signed out, ``gpufleet secret rotate``, the
user disabled), not expired, its user enabled and its token neither revoked
nor expired. Checking one costs one query by primary key.

Every function takes an open session and leaves committing to its caller.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from gpufleet.db.models import APIToken, BrowserSession, User
from gpufleet.db.session import rows_changed
from gpufleet.db.types import utcnow


# How long an expired session's row stays (so `why was I signed out` can still be read).
_KEEP_ENDED = timedelta(days=1)


@dataclass(frozen=True)
class SessionOwner:
    """Who a live session acts as (the fields :class:`gpufleet.users.tokens.TokenOwner` has, and the session)."""

    user_id: uuid.UUID
    name: str
    role: str
    token_id: uuid.UUID  # all zeros when opened without a token
    session_id: uuid.UUID


@dataclass(frozen=True)
class OpenedSession:
    id: uuid.UUID
    key: str  # goes into the cookie; only its hash is stored
    expires_at: datetime


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def open_session(sess: Session, user_id: uuid.UUID, token_id: uuid.UUID | None, ttl_s: int) -> OpenedSession:
    """A new session for ``user_id``, ending after ``ttl_s`` or with its token, whichever comes first."""
    now = utcnow()
    expires = now + timedelta(seconds=ttl_s)
    if token_id is not None:
        token_expires = sess.scalar(select(APIToken.expires_at).where(APIToken.id == token_id))
        if token_expires is not None:
            expires = min(expires, token_expires)
    # Rows of this user's sessions long over are of no use: signing in sweeps them.
    sess.execute(delete(BrowserSession).where(BrowserSession.user_id == user_id,
                                              BrowserSession.expires_at < now - _KEEP_ENDED))
    key = secrets.token_urlsafe(32)
    row = BrowserSession(user_id=user_id, token_id=token_id, key_hash=_hash(key), created_at=now, expires_at=expires)
    sess.add(row)
    sess.flush()
    return OpenedSession(row.id, key, expires)


def check_session(sess: Session, session_id: uuid.UUID, key: str | None) -> SessionOwner | str:
    """Who a live session acts as, or why it no longer counts.

    ``key`` is the cookie's; None only for a WebSocket ticket, itself signed
    and single-use, that a live session asked for.
    """
    stmt = (
        select(BrowserSession, User.name, User.role, User.disabled, APIToken.revoked_at, APIToken.expires_at)
        .join(User, User.id == BrowserSession.user_id)
        .outerjoin(APIToken, APIToken.id == BrowserSession.token_id)
        .where(BrowserSession.id == session_id)
    )
    row = sess.execute(stmt).one_or_none()
    if row is None or (key is not None and not hmac.compare_digest(row[0].key_hash, _hash(key))):
        return "this session is not known to the server; sign in again"
    bs, name, role, disabled, token_revoked, token_expires = row
    now = utcnow()
    if disabled:
        return f"user {name!r} is disabled"
    if bs.revoked_at is not None:
        return "this session has ended (signed out, or all sessions were ended); sign in again"
    if bs.expires_at <= now:
        return "this session has expired (GPUFLEET_SESSION_TTL_S); sign in again"
    if bs.token_id is not None and token_revoked is not None:
        return "the token this session was opened with was revoked; sign in again"
    if token_expires is not None and token_expires <= now:
        return "the token this session was opened with has expired; sign in again"
    return SessionOwner(bs.user_id, name, role, bs.token_id or uuid.UUID(int=0), bs.id)


def end_session(sess: Session, session_id: uuid.UUID) -> bool:
    """End one session (signing out); whether it was live."""
    res = sess.execute(update(BrowserSession).where(BrowserSession.id == session_id,
                                                    BrowserSession.revoked_at.is_(None)).values(revoked_at=utcnow()))
    return bool(rows_changed(res))


def end_sessions(sess: Session, *, user_id: uuid.UUID | None = None, token_id: uuid.UUID | None = None) -> int:
    """End every live session (of one user, or opened with one token, when given); how many ended."""
    stmt = update(BrowserSession).where(BrowserSession.revoked_at.is_(None))
    if user_id is not None:
        stmt = stmt.where(BrowserSession.user_id == user_id)
    if token_id is not None:
        stmt = stmt.where(BrowserSession.token_id == token_id)
    return rows_changed(sess.execute(stmt.values(revoked_at=utcnow())))
