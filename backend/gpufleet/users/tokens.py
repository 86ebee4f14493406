"""API tokens: their secrets, their rows, and who a token or a session acts as.

Tokens are random 256-bit strings; only their SHA-256 is stored, so a leaked
database does not leak working tokens. A plain hash is enough here (unlike
passwords) because the token has full entropy: there is nothing to guess.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.db.models import APIToken, User
from gpufleet.db.types import utcnow
from gpufleet.users.accounts import UserError, get_user

TOKEN_PREFIX = "gf_"
# Long enough for a person to tell tokens apart in `gpufleet tokens list`,
# short enough to carry no useful part of the secret (3 + 7 of 43 characters).
PREFIX_LEN = 10
# Writing last_used_at on every request would turn each read into a write.
_LAST_USED_GRANULARITY = timedelta(minutes=1)


@dataclass(frozen=True)
class NewToken:
    """A token as created: the secret is shown once and never stored."""

    secret: str
    prefix: str
    token_hash: str


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def new_token() -> NewToken:
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return NewToken(secret=secret, prefix=secret[:PREFIX_LEN], token_hash=hash_token(secret))


def looks_like_token(value: str) -> bool:
    # Cheap shape check so that garbage never reaches the database.
    return value.startswith(TOKEN_PREFIX) and 20 <= len(value) <= 128 and value.isascii()


@dataclass(frozen=True)
class TokenCreated:
    id: uuid.UUID
    user: str
    name: str
    prefix: str
    secret: str
    expires_at: datetime | None


def create_token(
    session: Session, user_name: str, label: str = "default", expires_days: int | None = None
) -> TokenCreated:
    user = get_user(session, user_name)
    if user.disabled:
        raise UserError(f"user {user_name!r} is disabled; enable it before creating tokens")
    label = label.strip()
    if not 1 <= len(label) <= 128:
        raise UserError("token name must be 1-128 characters")
    if expires_days is not None and not 1 <= expires_days <= 3650:
        raise UserError("--expires-days must be between 1 and 3650")
    tok: NewToken = new_token()
    expires = utcnow() + timedelta(days=expires_days) if expires_days else None
    row = APIToken(
        user_id=user.id, name=label, token_hash=tok.token_hash, prefix=tok.prefix, expires_at=expires
    )
    session.add(row)
    session.flush()
    return TokenCreated(row.id, user.name, label, tok.prefix, tok.secret, expires)


def list_tokens(session: Session, user_name: str | None = None) -> list[tuple[APIToken, str]]:
    stmt = select(APIToken, User.name).join(User, User.id == APIToken.user_id).order_by(User.name, APIToken.created_at)
    if user_name is not None:
        stmt = stmt.where(User.name == user_name)
    return [(tok, name) for tok, name in session.execute(stmt)]


def live_token_counts(session: Session) -> dict[str, int]:
    """User name -> how many of its tokens still work (not revoked, not expired)."""
    now = utcnow()
    live: dict[str, int] = {}
    for tok, owner in list_tokens(session):
        if tok.revoked_at is None and (tok.expires_at is None or tok.expires_at > now):
            live[owner] = live.get(owner, 0) + 1
    return live


def revoke_token(session: Session, ident: str) -> APIToken:
    """Revoke by token id or by its prefix (as shown by `gpufleet tokens list`)."""
    stmt = select(APIToken)
    try:
        stmt = stmt.where(APIToken.id == uuid.UUID(ident))
    except ValueError:
        stmt = stmt.where(APIToken.prefix == ident)
    rows = list(session.scalars(stmt))
    if not rows:
        raise UserError(f"no token with id or prefix {ident!r}; see `gpufleet tokens list`")
    if len(rows) > 1:
        raise UserError(f"prefix {ident!r} matches {len(rows)} tokens; revoke by id instead")
    tok = rows[0]
    if tok.revoked_at is None:
        tok.revoked_at = utcnow()
    return tok


@dataclass(frozen=True)
class TokenOwner:
    user_id: uuid.UUID
    name: str
    role: str
    token_id: uuid.UUID
    # The token's last-used time is older than the granularity: record this use.
    stale_use: bool = False


def authenticate_token(session: Session, secret: str) -> TokenOwner | str:
    """The user behind a token, or the reason it is refused."""
    if not looks_like_token(secret):
        return "the bearer token is malformed; create one with `gpufleet tokens create USER`"
    row = session.execute(
        select(APIToken, User).join(User, User.id == APIToken.user_id).where(APIToken.token_hash == hash_token(secret))
    ).one_or_none()
    if row is None:
        return "the bearer token is not known"
    tok, user = row
    now = utcnow()
    if tok.revoked_at is not None:
        return "the bearer token was revoked"
    if tok.expires_at is not None and tok.expires_at <= now:
        return "the bearer token has expired"
    if user.disabled:
        return f"user {user.name!r} is disabled"
    stale = tok.last_used_at is None or now - tok.last_used_at > _LAST_USED_GRANULARITY
    return TokenOwner(user.id, user.name, user.role, tok.id, stale_use=stale)


def attempted_owner(session: Session, secret: str) -> str | None:
    """Whose token a refused one was meant to be: the owner of the one token with its shown prefix, if any.

    Lets a sign-in limit count failures per account as well as per source."""
    if not looks_like_token(secret):
        return None
    names = session.execute(select(User.name).join(APIToken, APIToken.user_id == User.id)
                            .where(APIToken.prefix == secret[:PREFIX_LEN]).limit(2)).scalars().all()
    return names[0] if len(names) == 1 else None


def mark_token_used(session: Session, token_id: uuid.UUID) -> None:
    # A transaction that holds the token's row (a revoke, an edit) must not hold
    # up the request: the time is bookkeeping, so it is skipped this once.
    # (SQLite has no row locks; its single writer is waited for as usual.)
    tok = session.scalars(select(APIToken).where(APIToken.id == token_id).with_for_update(skip_locked=True)).first()
    if tok is not None:
        tok.last_used_at = utcnow()


def check_session_owner(session: Session, user_id: uuid.UUID, token_id: uuid.UUID | None) -> TokenOwner | str:
    """Re-check a signed session: the user must still be enabled and its token live.

    A session names the token it was opened with, so revoking the token (or
    disabling the user) ends every browser session opened with it. One query:
    this runs on every request a browser makes.
    """
    stmt = select(User.name, User.role, User.disabled, APIToken.id, APIToken.revoked_at, APIToken.expires_at)
    stmt = stmt.outerjoin(
        APIToken, (APIToken.user_id == User.id) & (APIToken.id == (token_id or uuid.UUID(int=0)))
    ).where(User.id == user_id)
    row = session.execute(stmt).one_or_none()
    if row is None or row.disabled:
        return "the session's user no longer exists or is disabled; sign in again"
    if token_id is not None:
        if row.id is None or row.revoked_at is not None:
            return "the token this session was opened with was revoked; sign in again"
        if row.expires_at is not None and row.expires_at <= utcnow():
            return "the token this session was opened with has expired; sign in again"
    return TokenOwner(user_id, row.name, row.role, token_id or uuid.UUID(int=0))
