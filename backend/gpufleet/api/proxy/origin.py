"""The notebooks' origin: ``/sessions/{id}/…`` served on a listener of its own, never on the dashboard's.

What a member serves (her Jupyter server, which she may configure or
replace) is code the viewer's browser runs. Served from the dashboard's
origin it could call the API with the viewer's cookie; here it cannot: each
notebook has a host name of its own (:mod:`.place`), this origin holds no
dashboard credential (the dashboard's cookie is ignored and never
forwarded), and the API refuses a write from any other origin.

Who gets in (:mod:`.passes`), the session's owner, or an admin who joined it:

- a GET with ``?gpufleet_ticket=`` (single-use, from the dashboard) is
  answered with the notebook's page itself, the notebook's cookie set and the
  page's key in place of Jupyter's token;
- a request with that cookie and the page's key (``Authorization: token``,
  or ``?token=`` on a WebSocket) is the page's own: forwarded with Jupyter's
  real token;
- with the cookie alone, a GET that is not a page load is forwarded as no
  one (no token, no cookie: what any local account reaches at the notebook's
  port anyway: its static files), a page load goes back to the dashboard for
  a fresh ticket, and anything else is refused;
- a script sends ``Authorization: Bearer <token>`` (the owner's).

Every request is checked again: the user, the session's owner, the session running.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlencode

from anyio import to_thread
from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import JSONResponse, RedirectResponse
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from gpufleet.api.auth import NOTEBOOK_COOKIE_PURPOSE, NOTEBOOK_TICKET_PURPOSE, AuthError, resolve_user
from gpufleet.api.proxy.answers import answer_headers
from gpufleet.api.proxy.forward import Answer, forward_http, proxy_client
from gpufleet.api.proxy.notebooks import PREFIX, Notebook, may_open, split_path
from gpufleet.api.proxy.passes import (
    TICKET_PARAM,
    TICKET_TTL_S,
    Pass,
    cookie_place,
    key_matches,
    make_notebook_pass,
    page_key,
    read_pass,
    same_origin,
)
from gpufleet.api.proxy.place import WrongHost, check_host
from gpufleet.api.proxy.sessions_source import Locator, notebook_of_session
from gpufleet.api.proxy.sockets import forward_websocket
from gpufleet.api.proxy.upstream import Unreachable, Upstream, upstream_for
from gpufleet.api.security.origins import SAFE_METHODS
from gpufleet.api.security.ratelimits import MemoryLimiter, RedisLimiter
from gpufleet.config import Settings

log = logging.getLogger(__name__)

NOT_YOURS = ("this session's notebook is open only to its owner (an admin joins it from the Sessions page,"
             " which is recorded); sign in as its owner")
HOW_TO_OPEN = ("open this session's notebook from the dashboard (Sessions page, Open), which lets this browser in;"
               " scripts send 'Authorization: Bearer <token>'")
NEEDS_KEY = ("this request needs the notebook page's own key beside its cookie: reload the notebook from the"
             " dashboard (Sessions page, Open)")


class Refusal(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = detail


class Reopen(Exception):
    """A page load without a fresh ticket: back to the dashboard, which makes one and comes back."""

    def __init__(self, url: str):
        super().__init__(url)
        self.url = url


@dataclass(frozen=True)
class Entry:
    """How a request got in: ``ticket`` (redeemed now), ``key`` (the page's cookie and key), ``bearer``
    (a script's token), ``anonymous`` (the cookie alone: forwarded as no one)."""

    how: str
    granted: Pass
    notebook: Notebook


class NotebookOrigin:
    """The ASGI app `serve` runs on ``GPUFLEET_SESSIONS_PORT``: notebooks and nothing else."""

    def __init__(self, settings: Settings, locate: Locator | None = None):
        self.settings = settings
        self.locate = locate or notebook_of_session
        self.tickets = RedisLimiter(settings.redis_url) if settings.redis_url else MemoryLimiter()
        self.client = proxy_client()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return
        parsed = split_path(scope["path"])
        if parsed is not None and scope["path"] == PREFIX + parsed[0] and scope["type"] == "http":
            # The notebook's base URL ends with a slash; its relative links need it (a ticket goes along).
            query = (scope.get("query_string") or b"").decode("latin-1")
            await RedirectResponse(scope["path"] + "/" + (f"?{query}" if query else ""),
                                   status_code=307)(scope, receive, send)
            return
        try:
            if parsed is None:
                raise Refusal(404, "this address serves sessions' notebooks only, at /sessions/{id}/")
            try:
                check_host(self.settings, Headers(scope=scope).get("host"), parsed[0])
            except WrongHost as exc:
                raise Refusal(400, str(exc)) from None
            entry = await self._admit(scope, parsed[0])
            upstream = upstream_for(self.settings, entry.notebook)
        except Refusal as exc:
            await _refuse(scope, receive, send, exc)
            return
        except Reopen as exc:
            await RedirectResponse(exc.url, status_code=303, headers={"Cache-Control": "no-store"})(
                scope, receive, send)
            return
        except Unreachable as exc:
            await _refuse(scope, receive, send, Refusal(502, str(exc)))
            return
        if scope["type"] == "websocket":
            await forward_websocket(WebSocket(scope, receive, send), upstream)
        elif entry.how == "ticket":
            await self._let_in(scope, receive, send, entry, upstream)
        else:
            anonymous = entry.how == "anonymous"
            back = self._reopening(scope, entry) if anonymous else None
            await forward_http(self.client, scope, receive, send, upstream.anonymous() if anonymous else upstream,
                               Answer(secret=entry.notebook.token, cookies=not anonymous, instead=back,
                                      shape=lambda _status, headers: answer_headers(headers, scope["path"])))

    async def _admit(self, scope: Scope, session_id: str) -> Entry:
        """Who asks, how, for which notebook; :class:`Refusal` or :class:`Reopen` when not now."""
        headers = Headers(scope=scope)
        query = dict(parse_qsl((scope.get("query_string") or b"").decode("latin-1")))
        how, granted, offered = await self._credentials(scope, headers, query, session_id)
        notebook: Notebook | None = await to_thread.run_sync(self.locate, self.settings, session_id)
        if notebook is None:
            raise Refusal(404, f"there is no session {session_id!r}")
        if not may_open(granted.user, notebook, joined=granted.joined):
            raise Refusal(403, NOT_YOURS)
        if not notebook.reachable:
            raise Refusal(409, f"session {session_id} is {notebook.status}; its notebook is not running")
        if how == "key":
            assert notebook.token is not None
            if not key_matches(self.settings, session_id, granted.nonce, notebook.token, offered):
                raise Refusal(403, NEEDS_KEY)
            if _writes(scope) and not _from_here(scope, headers):
                raise Refusal(403, "a request from another origin may not use this notebook's sign-in")
        return Entry(how, granted, notebook)

    async def _credentials(self, scope: Scope, headers: Headers, query: dict[str, str],
                           session_id: str) -> tuple[str, Pass, str | None]:
        """(how, the pass, the key offered) from the request's ticket, token or cookie and key."""
        secure = scope.get("scheme") in ("https", "wss")
        name, _ = cookie_place(self.settings, session_id, secure)
        cookie = cookie_parser(headers.get("cookie", "")).get(name)
        held = (await to_thread.run_sync(read_pass, self.settings, NOTEBOOK_COOKIE_PURPOSE, cookie, session_id)
                if cookie else None)
        if TICKET_PARAM in query and scope["type"] == "http" and scope["method"] in ("GET", "HEAD"):
            ticket = await to_thread.run_sync(read_pass, self.settings, NOTEBOOK_TICKET_PURPOSE, query[TICKET_PARAM],
                                              session_id)
            if ticket is None or not self.tickets.claim_once(f"notebook-ticket:{ticket.nonce}", TICKET_TTL_S + 5):
                self._reopen(scope, headers, session_id, ticket or held)
                raise Refusal(403, "this notebook link was used already or has expired; open the notebook from"
                                   " the dashboard again")
            return "ticket", ticket, None
        authorization = headers.get("authorization", "")
        scheme_, _, value = authorization.partition(" ")
        if scheme_.lower() == "bearer":
            try:
                user = await to_thread.run_sync(resolve_user, self.settings, "GET", {"authorization": authorization},
                                                {})
            except AuthError as exc:
                raise Refusal(403, exc.reason) from None
            return "bearer", Pass(user, "", None, False), None
        if authorization and scheme_.lower() != "token":
            raise Refusal(403, HOW_TO_OPEN)
        if held is None:
            raise Refusal(403, HOW_TO_OPEN)
        offered = value.strip() if authorization else query.get("token")
        if offered:
            return "key", held, offered
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD"):
            return "anonymous", held, None
        raise Refusal(403, NEEDS_KEY)

    def _reopen(self, scope: Scope, headers: Headers, session_id: str, known: Pass | None) -> None:
        """A page load with a used or stale ticket goes back to the dashboard it came from, for a fresh one."""
        step = _open_step(scope, headers, session_id, known)
        if step is not None:
            raise Reopen(step)

    def _reopening(self, scope: Scope, entry: Entry) -> Callable[[int, list[tuple[bytes, bytes]]], str | None]:
        """For a page load forwarded as no one: where to go instead when the notebook wants a sign-in (its
        lab, its files), namely the dashboard's open step; a static file is served as it is."""
        step = _open_step(scope, Headers(scope=scope), entry.notebook.session_id, entry.granted)

        def instead(status: int, headers: list[tuple[bytes, bytes]]) -> str | None:
            location = next((v for n, v in headers if n == b"location"), b"")
            wants_sign_in = status in (401, 403) or (300 <= status < 400 and b"/login" in location)
            return step if wants_sign_in else None

        return instead

    async def _let_in(self, scope: Scope, receive: Receive, send: Send, entry: Entry, upstream: Upstream) -> None:
        """Answer a redeemed ticket with the notebook's page: its cookie set, the page's key in place of the
        token. A redirect within the notebook (its root to its lab) takes a new ticket along instead."""
        secure = scope.get("scheme") == "https"
        sid, granted = entry.notebook.session_id, entry.granted
        value = make_notebook_pass(self.settings, granted.user, sid, NOTEBOOK_COOKIE_PURPOSE,
                                   self.settings.session_ttl_s, dashboard=granted.dashboard, joined=granted.joined)
        cookie = read_pass(self.settings, NOTEBOOK_COOKIE_PURPOSE, value, sid)
        assert cookie is not None and entry.notebook.token is not None
        key = page_key(self.settings, sid, cookie.nonce, len(entry.notebook.token))
        name, path = cookie_place(self.settings, sid, secure)

        def shape(status: int, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
            out = answer_headers(headers, scope["path"])
            location = next((v.decode("latin-1") for n, v in out if n == b"location"), "").rstrip("?&")
            if 300 <= status < 400 and location.startswith(PREFIX + sid + "/"):
                again = make_notebook_pass(self.settings, granted.user, sid, NOTEBOOK_TICKET_PURPOSE, TICKET_TTL_S,
                                           dashboard=granted.dashboard, joined=granted.joined)
                joiner = "&" if "?" in location else "?"
                return [(n, v) for n, v in out if n != b"location"] + [
                    (b"location", f"{location}{joiner}{urlencode({TICKET_PARAM: again})}".encode("latin-1"))]
            flags = "; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")
            out.append((b"set-cookie", f"{name}={value}; Max-Age={int(self.settings.session_ttl_s)}; Path={path}"
                                       f"{flags}".encode("latin-1")))
            out.append((b"referrer-policy", b"no-referrer"))  # the ticket's URL stays out of Referer
            out.append((b"cache-control", b"no-store"))  # the page holds its key: never from a cache
            return out

        log.info("%s opened session %s's notebook%s", granted.user.name, sid, " (joined)" if granted.joined else "")
        await forward_http(self.client, scope, receive, send, upstream,
                           Answer(secret=entry.notebook.token, replacement=key, shape=shape))

    async def aclose(self) -> None:
        await self.client.aclose()


def _open_step(scope: Scope, headers: Headers, session_id: str, known: Pass | None) -> str | None:
    """The dashboard's open step for this notebook, when this is a page load and the pass names a dashboard."""
    if known is None or not known.dashboard or not _page_load(scope, headers):
        return None
    return f"{known.dashboard}/sessions?open={quote(session_id)}" + ("&join=1" if known.joined else "")


def _writes(scope: Scope) -> bool:
    return scope["type"] == "websocket" or scope["method"] not in SAFE_METHODS


def _page_load(scope: Scope, headers: Headers) -> bool:
    """A browser loading a page (a tab's navigation), not a page's own request."""
    if scope["type"] != "http" or scope["method"] != "GET":
        return False
    mode = headers.get("sec-fetch-mode")
    return mode == "navigate" if mode else "text/html" in headers.get("accept", "")


def _from_here(scope: Scope, headers: Headers) -> bool:
    if headers.get("sec-fetch-site") in ("cross-site", "same-site"):
        return False
    asked: str = scope.get("scheme", "http")
    scheme = {"ws": "http", "wss": "https"}.get(asked, asked)
    return same_origin(headers.get("origin"), scheme, headers.get("host"))


async def _refuse(scope: Scope, receive: Receive, send: Send, refusal: Refusal) -> None:
    response = JSONResponse({"detail": refusal.detail}, status_code=refusal.status)
    if scope["type"] == "http":
        await response(scope, receive, send)
        return
    websocket = WebSocket(scope, receive, send)
    if "websocket.http.response" in scope.get("extensions", {}):
        await websocket.send_denial_response(response)
    else:
        await websocket.close(1008, refusal.detail[:120])
