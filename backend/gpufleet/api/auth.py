"""Who is asking: tokens, session cookies and WebSocket tickets.

A request is authenticated, in this order, by ``Authorization: Bearer <token>``,
by the Unix account that connected to the server's socket (its peer
credentials, :mod:`gpufleet.api.unixsocket`), by the dashboard's signed
HTTP-only session cookie (which counts only while its row in
``browser_sessions`` is live: :mod:`gpufleet.users.signin`), or — only in
single-user mode (see
:func:`~gpufleet.api.security.policy.auth_required`) — as the implicit local
admin ``local``. Every refusal carries a reason a person can act on.

A browser attaches a cookie (and reaches the implicit local admin) on its own,
so those credentials count only from an allowed origin
(:mod:`gpufleet.api.security.origins`), and a cookie counts only beside its
session's page key (:mod:`gpufleet.api.pagekey`), which the browser never sends
by itself: a cookie captured on another port of the host signs nothing in. A
WebSocket takes no cookie at all: the dashboard opens it with a single-use
ticket. A bearer token is never attached by a browser on its own, so it needs
no such check.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from fastapi import WebSocket
from sqlalchemy.exc import OperationalError

from gpufleet.api import pagekey
from gpufleet.api.security.origins import is_cross_site, not_json_refusal, origin_allowed
from gpufleet.api.security.policy import auth_required
from gpufleet.api.security.ratelimits import get_limiter
from gpufleet.api.security.signing import sign, unsign
from gpufleet.api.unixsocket import Peer, scope_peer
from gpufleet.config import Settings
from gpufleet.db.session import session_scope, write_session
from gpufleet.users.accounts import LOCAL_USER_NAME, UserError, may_write
from gpufleet.users.local import local_account_user
from gpufleet.users.signin import SessionOwner, check_session, open_session
from gpufleet.users.tokens import TokenOwner, authenticate_token, check_session_owner, mark_token_used

log = logging.getLogger(__name__)

SESSION_COOKIE = "gpufleet_session"
# Over https the cookie is host-only (the browser refuses a __Host- cookie with a Domain, another Path or no
# Secure), so no sibling host name (a notebook's, say) can set or replace it. Plain http (a loopback
# install) cannot use the prefix; there the name is SESSION_COOKIE.
SECURE_SESSION_COOKIE = "__Host-" + SESSION_COOKIE
SESSION_PURPOSE = "session"
TICKET_PURPOSE = "ws-ticket"
LINK_PURPOSE = "sign-in-link"
# A notebook's origin: the dashboard's ticket to open one session's notebook, and the cookie it becomes there.
NOTEBOOK_TICKET_PURPOSE = "notebook-ticket"
NOTEBOOK_COOKIE_PURPOSE = "notebook-cookie"


@dataclass(frozen=True)
class AuthUser:
    """The user a request acts as."""

    name: str
    role: str  # admin | member | viewer
    id: uuid.UUID | None = None  # None for the implicit local admin
    # How the request proved it: token | session | ticket | socket | local
    via: str = "token"
    token_id: uuid.UUID | None = None
    # The browser session (gpufleet.users.signin) it came through, if any.
    session_id: uuid.UUID | None = None

    @property
    def can_write(self) -> bool:
        return may_write(self.role)

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


LOCAL_ADMIN = AuthUser(name=LOCAL_USER_NAME, role="admin", id=None, via="local")


class AuthError(Exception):
    """Authentication failed: ``status`` is 401 or 403 (415: a browser's write not in JSON), ``reason`` says what
    to do."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


# Request authentication --------------------------------------------------


def _owner_to_user(owner: TokenOwner | SessionOwner, via: str) -> AuthUser:
    tid = owner.token_id if owner.token_id.int else None
    return AuthUser(name=owner.name, role=owner.role, id=owner.user_id, via=via, token_id=tid,
                    session_id=getattr(owner, "session_id", None))


def signed_user(settings: Settings, purpose: str, value: str, via: str) -> AuthUser | str:
    """The user of a session cookie, a WebSocket ticket or a notebook's pass, re-checked against the database."""
    payload = unsign(settings.secret_key, purpose, value)
    if payload is None:
        return "the session has expired or is not valid; sign in again"
    session_id = user_id = token_id = key = None
    try:
        if payload.get("s"):
            session_id, key = uuid.UUID(str(payload["s"])), payload.get("k")
            if purpose == SESSION_PURPOSE and not isinstance(key, str):
                raise ValueError("a cookie carries its session's key")
        elif purpose in (TICKET_PURPOSE, LINK_PURPOSE, NOTEBOOK_TICKET_PURPOSE, NOTEBOOK_COOKIE_PURPOSE,
                         pagekey.DOWNLOAD_PURPOSE):
            # A ticket a bearer token asked for, or a sign-in link: its user and token.
            user_id = uuid.UUID(str(payload["u"]))
            token_id = uuid.UUID(str(payload["t"])) if payload.get("t") else None
        else:
            # Every cookie names its session row: a validly signed one without it was never made here.
            raise ValueError("no session")
    except (KeyError, ValueError):
        return "the session is not valid; sign in again"
    if session_id is None and user_id is None:
        return "the session is not valid; sign in again"
    with session_scope(settings) as sess:
        owner: TokenOwner | SessionOwner | str
        if session_id is not None:
            owner = check_session(sess, session_id, key)
        elif user_id is not None:
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


def peer_user(settings: Settings, peer: Peer) -> AuthUser:
    """The user of the account that connected to the socket; :class:`AuthError` (403) when it may not be one."""
    try:
        with session_scope(settings) as sess:
            owner = local_account_user(sess, peer.uid, create=False, run_account=settings.run_account)
        if owner is None:
            with write_session(settings) as sess:
                owner = local_account_user(sess, peer.uid, run_account=settings.run_account)
    except UserError as exc:
        raise AuthError(403, str(exc)) from None
    if owner is None:  # made on first use above: never None
        raise AuthError(403, f"the account with uid {peer.uid} is no gpufleet user")
    return _owner_to_user(owner, "socket")


def session_cookie_name(secure: bool) -> str:
    return SECURE_SESSION_COOKIE if secure else SESSION_COOKIE


def session_cookie_of(cookies: Mapping[str, str], secure: bool | None = None) -> str | None:
    """The dashboard's cookie among ``cookies``: over https (``secure``) only the host-only one counts;
    None (the scheme is not known here): the host-only one first."""
    if secure is None:
        return cookies.get(SECURE_SESSION_COOKIE) or cookies.get(SESSION_COOKIE)
    return cookies.get(session_cookie_name(secure))


def check_browser_write(method: str, headers: Mapping[str, str], settings: Settings, *, cookie: bool = True) -> None:
    """Refuse a request that carries the browser's credentials from another origin (403) or not as JSON (415).

    ``cookie=False``: the implicit local admin, which any local client reaches. A
    request without the headers every browser sets on a write (``Origin``,
    ``Sec-Fetch-Site``) is a program such as the CLI uploading an archive, not a
    page, and may send what it likes.
    """
    if is_cross_site(method, headers, settings):
        raise AuthError(403, "cross-origin request refused: its Origin (or Sec-Fetch-Site) is not the dashboard's,"
                             " and the browser's sign-in counts only from the dashboard's own origin (or an origin"
                             " in GPUFLEET_CORS_ORIGINS)")
    if not cookie and "origin" not in headers and "sec-fetch-site" not in headers:
        return
    if (refused := not_json_refusal(method, headers)) is not None:
        raise AuthError(415, refused)


NO_PAGE_KEY = ("the session cookie counts only with the dashboard's page key (the X-Gpufleet-Key header its"
               " page sends), and this request has none: a cookie alone, as a listener on another port of this"
               " host can receive it, signs nothing in. Reload the dashboard, or sign in again there; a program"
               " sends 'Authorization: Bearer <token>'")


def cookie_user(settings: Settings, cookie: str, headers: Mapping[str, str]) -> AuthUser | str:
    """The user of a session cookie sent with its page key in ``headers``; else why it counts for nothing."""
    payload = unsign(settings.secret_key, SESSION_PURPOSE, cookie)
    if payload is None:
        return "the session has expired or is not valid; sign in again"
    if not pagekey.header_matches(settings, payload, headers):
        return NO_PAGE_KEY
    return signed_user(settings, SESSION_PURPOSE, cookie, "session")


def resolve_user(
    settings: Settings, method: str, headers: Mapping[str, str], cookies: Mapping[str, str],
    peer: Peer | None = None, secure: bool | None = None,
) -> AuthUser:
    """Authenticate one HTTP request; raise :class:`AuthError` with the reason when refused.

    ``headers`` must be case-insensitive (Starlette's ``Headers``) or lowercase.
    ``peer``: the account that connected, for a request on the server's Unix
    socket (a token it sends still wins: it names who the caller means to be).
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
    if peer is not None:
        return peer_user(settings, peer)

    required = auth_required(settings)
    cookie = session_cookie_of(cookies, secure)
    if cookie:
        user = cookie_user(settings, cookie, headers)
        if isinstance(user, AuthUser):
            check_browser_write(method, headers, settings)
            return user
        if required:
            raise AuthError(401, user)
        # Without required sign-in a stale cookie must not lock the local admin out.

    if not required:
        if "forwarded" in headers or "x-forwarded-for" in headers:
            raise AuthError(
                401,
                "this server runs in single-user mode (no sign-in) for loopback use only, and this request came"
                " through a proxy; set GPUFLEET_AUTH=on (the default) and sign in with a token",
            )
        check_browser_write(method, headers, settings, cookie=False)
        return LOCAL_ADMIN

    raise AuthError(
        401,
        "sign-in required: send 'Authorization: Bearer <token>' (an admin creates one with"
        " `gpufleet tokens create USER`) or sign in on the dashboard",
    )


# Sessions and tickets -----------------------------------------------------


def make_session_cookie(settings: Settings, user: AuthUser) -> tuple[str, str]:
    """Open a browser session for ``user`` (a row, ``GPUFLEET_SESSION_TTL_S`` at most): its signed cookie and
    its page key, which only the page that signed in is given."""
    if user.id is None:
        raise ValueError("the implicit local admin has no session")
    with write_session(settings) as sess:
        opened = open_session(sess, user.id, user.token_id, settings.session_ttl_s)
    payload = {"s": str(opened.id), "k": opened.key}
    cookie = sign(settings.secret_key, SESSION_PURPOSE, payload, settings.session_ttl_s)
    return cookie, pagekey.page_key(settings, opened.id, opened.key)


def session_of_cookie(settings: Settings, value: str | None) -> uuid.UUID | None:
    """The session row a validly signed cookie names (for signing out), or None."""
    payload = unsign(settings.secret_key, SESSION_PURPOSE, value or "")
    try:
        return uuid.UUID(str(payload["s"])) if payload else None
    except (KeyError, ValueError):
        return None


def make_ws_ticket(settings: Settings, user: AuthUser) -> str:
    """A single-use ticket, valid for ``ws_ticket_ttl_s`` seconds, to open one WebSocket."""
    payload = {
        "u": str(user.id) if user.id else None,
        "t": str(user.token_id) if user.token_id else None,
        # A ticket a browser session asked for lives and dies with that session.
        "s": str(user.session_id) if user.session_id else None,
        "n": uuid.uuid4().hex,
    }
    return sign(settings.secret_key, TICKET_PURPOSE, payload, settings.ws_ticket_ttl_s)


def make_sign_in_link(settings: Settings, user: AuthUser) -> str:
    """The code of a single-use link, valid ``sign_in_link_ttl_s``, that signs a browser in as ``user``."""
    if user.id is None:
        raise ValueError("single-user mode's implicit admin needs no sign-in")
    payload = {"u": str(user.id), "t": str(user.token_id) if user.token_id else None, "n": uuid.uuid4().hex}
    return sign(settings.secret_key, LINK_PURPOSE, payload, settings.sign_in_link_ttl_s)


def redeem_sign_in_link(app: object, settings: Settings, code: str) -> AuthUser | str:
    """The user a sign-in link names, the first time it is used; else why it cannot sign anyone in."""
    expired = "this sign-in link has expired or is not valid; run `gpufleet open` for a new one"
    payload = unsign(settings.secret_key, LINK_PURPOSE, code)
    if payload is None or not isinstance(payload.get("n"), str):
        return expired
    # A link can be seen (a terminal's scrollback, a browser's history): it works once.
    if not get_limiter(app, settings).claim_once(f"sign-in-link:{payload['n']}", settings.sign_in_link_ttl_s + 5):
        return "this sign-in link was used already; run `gpufleet open` for a new one"
    user = signed_user(settings, LINK_PURPOSE, code, "session")
    return user if isinstance(user, AuthUser) else user


def _ticket_user(websocket: WebSocket, settings: Settings, ticket: str) -> AuthUser | None:
    payload = unsign(settings.secret_key, TICKET_PURPOSE, ticket)
    if payload is None or not isinstance(payload.get("n"), str):
        return None
    # A ticket in a URL can end up in logs; using it once makes that harmless.
    if not get_limiter(websocket.app, settings).claim_once(f"ws-ticket:{payload['n']}", settings.ws_ticket_ttl_s + 5):
        return None
    if payload.get("u") is None:
        return LOCAL_ADMIN if not auth_required(settings) else None
    user = signed_user(settings, TICKET_PURPOSE, ticket, "ticket")
    return user if isinstance(user, AuthUser) else None


def authenticate_websocket(websocket: WebSocket, settings: Settings) -> AuthUser | None:
    """The user of a WebSocket before it is accepted, or None: then close it (policy violation).

    Checks the Origin first (a browser page on another site must not ride on
    the implicit local admin), then an ``Authorization: Bearer <token>`` header
    (a script's client sends one; a browser never does), then a ``ticket`` query
    parameter from ``POST /api/v1/auth/ws-ticket``, then the implicit local
    admin. The session cookie never opens one. A long-lived token is never accepted in the
    URL: there a proxy's access log would keep it.
    """
    headers = websocket.headers
    if not origin_allowed(headers.get("origin"), headers.get("host"), settings):
        return None
    peer = scope_peer(websocket.scope)
    if peer is not None:
        try:
            return peer_user(settings, peer)
        except AuthError:
            return None
    if headers.get("authorization"):
        try:
            return resolve_user(settings, "GET", headers, {})
        except AuthError:
            return None
    ticket = websocket.query_params.get("ticket")
    if ticket:
        return _ticket_user(websocket, settings, ticket)
    # No cookie: a browser sends it by itself, with any Origin a program likes to write; the dashboard asks
    # for a ticket first (POST /api/v1/auth/ws-ticket, with its cookie and page key).
    if not auth_required(settings) and "x-forwarded-for" not in headers and "forwarded" not in headers:
        return LOCAL_ADMIN
    return None


def download_user(app: object, settings: Settings, ticket: str, path: str) -> AuthUser | None:
    """The user of a download ticket made for ``path``, the first time it is used (the live session or token
    it came from re-checked); else None."""
    payload = pagekey.claim_download_ticket(app, settings, ticket, path)
    if payload is None:
        return None
    if payload.get("u") is None and payload.get("s") is None:
        return LOCAL_ADMIN if not auth_required(settings) else None
    user = signed_user(settings, pagekey.DOWNLOAD_PURPOSE, ticket, "ticket")
    return user if isinstance(user, AuthUser) else None
