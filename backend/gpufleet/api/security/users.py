"""Users and their API tokens in the database.

Used by the CLI (`gpufleet users …`, `gpufleet tokens …`) and by request
authentication. Every function takes an open session and leaves committing to
the caller, so a CLI command or a request is one transaction.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.api.security.tokens import NewToken, hash_token, looks_like_token, new_token
from gpufleet.db.models import APIToken, User
from gpufleet.db.types import utcnow

ROLES = ("admin", "member", "viewer")
# The implicit user of a loopback server without sign-in; never a database row.
LOCAL_USER_NAME = "local"
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
# Writing last_used_at on every request would turn each read into a write.
_LAST_USED_GRANULARITY = timedelta(minutes=1)


class UserError(ValueError):
    """A user or token operation cannot be done; the message says why."""


@dataclass(frozen=True)
class TokenCreated:
    id: uuid.UUID
    user: str
    name: str
    prefix: str
    secret: str
    expires_at: datetime | None


def check_user_name(name: str) -> str:
    if not _NAME.match(name):
        raise UserError(
            f"user name {name!r} is not allowed: use 1-64 lowercase letters, digits, '.', '_' or '-',"
            " starting with a letter or digit"
        )
    if name == LOCAL_USER_NAME:
        raise UserError(f"user name {LOCAL_USER_NAME!r} is reserved for the loopback server's implicit admin")
    return name


def check_role(role: str) -> str:
    if role not in ROLES:
        raise UserError(f"role {role!r} is not one of {', '.join(ROLES)}")
    return role


def get_user(session: Session, name: str) -> User:
    user = session.scalars(select(User).where(User.name == name)).one_or_none()
    if user is None:
        raise UserError(f"no user named {name!r}; add one with `gpufleet users add {name}`")
    return user


def add_user(session: Session, name: str, role: str = "member") -> User:
    check_user_name(name)
    check_role(role)
    if session.scalars(select(User.id).where(User.name == name)).first() is not None:
        raise UserError(f"user {name!r} already exists")
    user = User(name=name, role=role, disabled=False)
    session.add(user)
    session.flush()
    return user


def list_users(session: Session) -> list[User]:
    return list(session.scalars(select(User).order_by(User.name)))


def set_disabled(session: Session, name: str, disabled: bool = True) -> User:
    user = get_user(session, name)
    user.disabled = disabled
    return user


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


def mark_token_used(session: Session, token_id: uuid.UUID) -> None:
    tok = session.get(APIToken, token_id)
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
