"""Who is asking: tokens, session cookies, WebSocket tickets and safe defaults.

A request is authenticated, in this order, by ``Authorization: Bearer <token>``,
by the dashboard's signed HTTP-only session cookie, or — only when sign-in is
not required (see :func:`auth_required`) — as the implicit local admin
``local``. Every refusal carries a reason a person can act on.

Cookies ride along on cross-site requests and WebSockets are not covered by
CORS, so whenever the browser supplied the credentials (a cookie, or the
implicit local admin) a state-changing request or a WebSocket must come from an
allowed origin. A bearer token is never attached by a browser on its own, so it
needs no such check.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import FastAPI, WebSocket
from sqlalchemy.exc import OperationalError

from gpufleet.api.security.tokens import sign, unsign
from gpufleet.api.security.users import (
    LOCAL_USER_NAME,
    TokenOwner,
    authenticate_token,
    mark_token_used,
    check_session_owner,
)
from gpufleet.config import DEFAULT_SECRET, ConfigError, Settings
from gpufleet.db.session import session_scope, write_session

log = logging.getLogger(__name__)

SESSION_COOKIE = "gpufleet_session"
SESSION_PURPOSE = "session"
TICKET_PURPOSE = "ws-ticket"
MIN_SECRET_LEN = 32
# Lower bounds on what the secret's text shows (see secret_strength): a random
# 32-character hex string shows about 100 bits; 32 x "a" shows none.
MIN_SECRET_BITS = 80
MIN_SECRET_DISTINCT = 8
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class AuthUser:
    """The user a request acts as."""

    name: str
    role: str  # admin | member | viewer
    id: uuid.UUID | None = None  # None for the implicit local admin
    # How the request proved it: token | session | ticket | local
    via: str = "token"
    token_id: uuid.UUID | None = None

    @property
    def can_write(self) -> bool:
        return self.role in ("admin", "member")

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


LOCAL_ADMIN = AuthUser(name=LOCAL_USER_NAME, role="admin", id=None, via="local")


class AuthError(Exception):
    """Authentication failed: ``status`` is 401 or 403, ``reason`` says what to do."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


def auth_required(settings: Settings) -> bool:
    """Whether every request must prove who it is.

    ``auto`` allows the implicit local admin only for the one-machine default:
    bound to loopback with no external database or broker. A fleet deployment
    usually sits behind a proxy on the same host, so loopback alone proves
    nothing there. ``off`` is accepted only on loopback (see
    :func:`check_serve_safety`).
    """
    if settings.auth == "on":
        return True
    if settings.auth == "off":
        return False
    return not (settings.is_loopback and settings.is_embedded)


def secret_strength(secret: str) -> float:
    """Bits of entropy the text of ``secret`` shows (its length times its per-character Shannon entropy).

    A cheap lower bound on what a guesser faces: 32 x ``a`` shows 0 bits,
    ``secrets.token_urlsafe(48)`` about 350. It cannot see that a random
    looking string was copied from a web page, but it catches the keyboard
    patterns and repeated characters people type.
    """
    if not secret:
        return 0.0
    counts = Counter(secret)
    n = len(secret)
    return -n * sum(c / n * math.log2(c / n) for c in counts.values())


def secret_problem(secret: str) -> str | None:
    """Why ``secret`` must not sign sessions, or None when it may."""
    if secret == DEFAULT_SECRET:
        return "is the built-in placeholder"
    if len(secret) < MIN_SECRET_LEN:
        return f"is {len(secret)} characters long, fewer than {MIN_SECRET_LEN}"
    if secret_strength(secret) < MIN_SECRET_BITS or len(set(secret)) < MIN_SECRET_DISTINCT:
        return "is too predictable (too few different characters)"
    if (secret + secret).find(secret, 1) < len(secret):
        return "is too predictable (one short part repeated)"
    return None


def check_serve_safety(settings: Settings) -> None:
    """Refuse a configuration that would expose an open server to the network."""
    problem = secret_problem(settings.secret_key)
    secret_ok = problem is None
    secret_hint = (
        f"GPUFLEET_SECRET_KEY set to a random value of at least {MIN_SECRET_LEN} characters"
        " (make one with `gpufleet secret`, or"
        " `python -c 'import secrets; print(secrets.token_urlsafe(48))'`)"
    )
    if problem is not None and settings.secret_key != DEFAULT_SECRET:
        secret_hint += f"; the one set {problem}"
    if not settings.is_loopback:
        # Beyond loopback ``auto`` already means sign-in (see auth_required); only ``off`` is refused.
        if settings.auth == "off" or not secret_ok:
            raise ConfigError(
                f"binding to {settings.host} exposes gpufleet to the network: it needs sign-in "
                f"(GPUFLEET_AUTH=auto, the default, or GPUFLEET_AUTH=on; not off) and "
                f"{secret_hint}; or bind to 127.0.0.1 (GPUFLEET_HOST) for a local server without sign-in"
            )
    elif auth_required(settings) and not secret_ok:
        # Session cookies are signed with the secret: a known secret lets anyone forge one.
        raise ConfigError(f"sign-in is required (GPUFLEET_AUTH={settings.auth}), so it needs {secret_hint}")
    if "*" in settings.cors_origins:
        raise ConfigError(
            "GPUFLEET_CORS_ORIGINS must list exact origins (e.g. [\"https://gpus.example.org\"]), not '*':"
            " the dashboard's session cookie must not be usable from any site"
        )
    for origin in settings.cors_origins:
        if _normalise_origin(origin) is None:
            raise ConfigError(f"GPUFLEET_CORS_ORIGINS: {origin!r} is not an origin like https://host[:port]")


# Origins ---------------------------------------------------------------


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _normalise_origin(origin: str) -> str | None:
    """``scheme://host[:port]`` in lowercase, the scheme's default port left out."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        return None
    if parts.query or parts.fragment or parts.username or parts.password:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    shown_port = "" if port in (None, _DEFAULT_PORTS[parts.scheme]) else f":{port}"
    return f"{parts.scheme}://{host.lower()}{shown_port}"


def origin_allowed(origin: str | None, host_header: str | None, settings: Settings) -> bool:
    """An absent Origin (a non-browser client) passes; otherwise same-origin or configured.

    Same-origin compares the Origin's host and port with the Host header the
    request arrived with (a proxy in front must pass it on unchanged).
    """
    if origin is None:
        return True
    norm = _normalise_origin(origin)
    if norm is None:
        return False
    scheme = norm.split("://", 1)[0]
    if host_header and _normalise_origin(f"{scheme}://{host_header.strip()}") == norm:
        return True
    return norm in {_normalise_origin(o) for o in settings.cors_origins}


def _is_cross_site(method: str, headers: Mapping[str, str], settings: Settings) -> bool:
    if method.upper() in SAFE_METHODS:
        return False
    if headers.get("sec-fetch-site") == "cross-site":
        return True
    return not origin_allowed(headers.get("origin"), headers.get("host"), settings)


# Request authentication --------------------------------------------------


def _owner_to_user(owner: TokenOwner, via: str) -> AuthUser:
    tid = owner.token_id if owner.token_id.int else None
    return AuthUser(name=owner.name, role=owner.role, id=owner.user_id, via=via, token_id=tid)


def _from_signed(settings: Settings, purpose: str, value: str, via: str) -> AuthUser | str:
    payload = unsign(settings.secret_key, purpose, value)
    if payload is None:
        return "the session has expired or is not valid; sign in again"
    try:
        user_id = uuid.UUID(str(payload["u"]))
        token_id = uuid.UUID(str(payload["t"])) if payload.get("t") else None
    except (KeyError, ValueError):
        return "the session is not valid; sign in again"
    with session_scope(settings) as sess:
        owner = check_session_owner(sess, user_id, token_id)
    return owner if isinstance(owner, str) else _owner_to_user(owner, via)


_recorded: dict[uuid.UUID, float] = {}
_recorded_lock = threading.Lock()
_RECORD_EVERY_S = 30.0


def _record_token_use(settings: Settings, token_id: uuid.UUID) -> None:
    """Note when a token was last used, in its own short write.

    Reading the token and writing its last-used time in one transaction failed
    with "database is locked" on SQLite while the agent wrote samples. The time
    is bookkeeping: a busy database must never refuse a valid token.
    """
    # A burst of requests with one token would each see the time as stale and
    # queue for the database's write lock; one of them records it.
    now = time.monotonic()
    with _recorded_lock:
        if now - _recorded.get(token_id, -1e9) < _RECORD_EVERY_S:
            return
        if len(_recorded) > 10_000:
            _recorded.clear()
        _recorded[token_id] = now
    try:
        with write_session(settings) as sess:
            mark_token_used(sess, token_id)
    except OperationalError as exc:
        log.debug("token %s: last-used time not recorded (%s)", token_id, exc)


def resolve_user(
    settings: Settings, method: str, headers: Mapping[str, str], cookies: Mapping[str, str]
) -> AuthUser:
    """Authenticate one HTTP request; raise :class:`AuthError` with the reason when refused.

    ``headers`` must be case-insensitive (Starlette's ``Headers``) or lowercase.
    """
    authz = headers.get("authorization")
    if authz:
        scheme, _, secret = authz.partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise AuthError(401, "the Authorization header must be 'Bearer <token>'")
        with session_scope(settings) as sess:
            owner = authenticate_token(sess, secret.strip())
        if isinstance(owner, str):
            raise AuthError(401, owner)
        if owner.stale_use:
            _record_token_use(settings, owner.token_id)
        return _owner_to_user(owner, "token")

    required = auth_required(settings)
    cookie = cookies.get(SESSION_COOKIE)
    if cookie:
        user = _from_signed(settings, SESSION_PURPOSE, cookie, "session")
        if isinstance(user, AuthUser):
            if _is_cross_site(method, headers, settings):
                raise AuthError(403, "cross-site request refused: its Origin is not allowed (GPUFLEET_CORS_ORIGINS)")
            return user
        if required:
            raise AuthError(401, user)
        # Without required sign-in a stale cookie must not lock the local admin out.

    if not required:
        if "forwarded" in headers or "x-forwarded-for" in headers:
            raise AuthError(
                401,
                "this server runs without sign-in for loopback use only, and this request came through a proxy;"
                " set GPUFLEET_AUTH=on and sign in with a token",
            )
        if _is_cross_site(method, headers, settings):
            raise AuthError(403, "cross-site request refused: its Origin is not allowed (GPUFLEET_CORS_ORIGINS)")
        return LOCAL_ADMIN

    raise AuthError(
        401,
        "sign-in required: send 'Authorization: Bearer <token>' (an admin creates one with"
        " `gpufleet tokens create USER`) or sign in on the dashboard",
    )


# Reading trainings --------------------------------------------------------


def may_read_training(settings: Settings, user: AuthUser, owner: str) -> bool:
    """Whether ``user`` may read a training's config, events and logs.

    ``GPUFLEET_TRAINING_VISIBILITY=team`` (the default, for a small team):
    every signed-in user. ``owner``: its owner and admins only; others still
    see that it exists, who owns it and which GPUs it holds.
    """
    return settings.training_visibility == "team" or user.is_admin or user.name == owner


def ensure_may_read_training(settings: Settings, user: AuthUser, owner: str) -> None:
    from fastapi import HTTPException

    if not may_read_training(settings, user, owner):
        raise HTTPException(
            403,
            f"the training belongs to {owner!r}; this server shows a training's config, events and logs only to"
            " its owner and admins (GPUFLEET_TRAINING_VISIBILITY=owner)",
        )


# Sessions and tickets -----------------------------------------------------


def make_session_cookie(settings: Settings, user: AuthUser) -> str:
    if user.id is None:
        raise ValueError("the implicit local admin has no session")
    payload = {"u": str(user.id), "t": str(user.token_id) if user.token_id else None}
    return sign(settings.secret_key, SESSION_PURPOSE, payload, settings.session_ttl_s)


def make_ws_ticket(settings: Settings, user: AuthUser) -> str:
    """A single-use ticket, valid for ``ws_ticket_ttl_s`` seconds, to open one WebSocket."""
    payload = {
        "u": str(user.id) if user.id else None,
        "t": str(user.token_id) if user.token_id else None,
        "n": uuid.uuid4().hex,
    }
    return sign(settings.secret_key, TICKET_PURPOSE, payload, settings.ws_ticket_ttl_s)


def _ticket_user(websocket: WebSocket, settings: Settings, ticket: str) -> AuthUser | None:
    payload = unsign(settings.secret_key, TICKET_PURPOSE, ticket)
    if payload is None or not isinstance(payload.get("n"), str):
        return None
    from gpufleet.api.limits import get_limiter

    # A ticket in a URL can end up in logs; using it once makes that harmless.
    if not get_limiter(websocket.app, settings).claim_once(f"ws-ticket:{payload['n']}", settings.ws_ticket_ttl_s + 5):
        return None
    if payload.get("u") is None:
        return LOCAL_ADMIN if not auth_required(settings) else None
    user = _from_signed(settings, TICKET_PURPOSE, ticket, "ticket")
    return user if isinstance(user, AuthUser) else None


def authenticate_websocket(websocket: WebSocket, settings: Settings) -> AuthUser | None:
    """The user of a WebSocket before it is accepted, or None: then close it (policy violation).

    Checks the Origin first (a browser page on another site must not ride on
    the user's cookie), then a ``ticket`` query parameter from
    ``POST /api/v1/auth/ws-ticket``, then the session cookie, then the implicit
    local admin. A long-lived token is never accepted in the URL.
    """
    headers = websocket.headers
    if not origin_allowed(headers.get("origin"), headers.get("host"), settings):
        return None
    ticket = websocket.query_params.get("ticket")
    if ticket:
        return _ticket_user(websocket, settings, ticket)
    cookie = websocket.cookies.get(SESSION_COOKIE)
    if cookie:
        user = _from_signed(settings, SESSION_PURPOSE, cookie, "session")
        if isinstance(user, AuthUser):
            return user
    if not auth_required(settings) and "x-forwarded-for" not in headers and "forwarded" not in headers:
        return LOCAL_ADMIN
    return None


def install(app: FastAPI, settings: Settings) -> None:
    """Add the auth routes, the auth gate, request limits and (only when configured) CORS."""
    from gpufleet.api.limits import install_limits
    from gpufleet.api.routes.auth import router

    app.include_router(router)
    install_limits(app, settings)
    if settings.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=[o for o in (_normalise_origin(x) for x in settings.cors_origins) if o],
            allow_credentials=True,
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
        )
