"""The notebooks' origin: ``/sessions/{id}/…`` served on a listener of its own, never on the dashboard's.

What a member serves (her Jupyter server, which she may configure or
replace) is code the viewer's browser runs. Served from the dashboard's
origin it could call the API with the viewer's cookie; here it cannot: this
origin holds no dashboard credential (the dashboard's cookie is ignored and
never forwarded), and the API refuses a write from any other origin.

Who gets in: a request with ``?gpufleet_ticket=`` (made by the dashboard for
the session's owner or an admin, single-use) is answered with this
session's own cookie and a redirect to the same address without it; later
requests carry that cookie. Scripts may send ``Authorization: Bearer
<token>`` instead. A cookie counts for a WebSocket or a state-changing
request only from this same origin. Every request is checked again: the
session's owner and admins only, the session running.
"""

from __future__ import annotations

import logging
from urllib.parse import parse_qsl, urlencode

import httpx
from anyio import to_thread
from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from gpufleet.api.auth import NOTEBOOK_COOKIE_PURPOSE, NOTEBOOK_TICKET_PURPOSE, AuthError, AuthUser, resolve_user
from gpufleet.api.proxy.forward import forward_http
from gpufleet.api.proxy.notebooks import PREFIX, Notebook, may_open, split_path
from gpufleet.api.proxy.passes import (
    TICKET_PARAM,
    TICKET_TTL_S,
    answer_headers,
    cookie_name,
    expected_host,
    make_notebook_pass,
    notebook_pass_user,
    same_origin,
)
from gpufleet.api.proxy.sessions_source import Locator, notebook_of_session
from gpufleet.api.proxy.sockets import forward_websocket
from gpufleet.api.proxy.upstream import Unreachable, upstream_for
from gpufleet.api.security.hosts import host_allowed, host_name
from gpufleet.api.security.origins import SAFE_METHODS
from gpufleet.api.security.ratelimits import MemoryLimiter, RedisLimiter
from gpufleet.config import Settings

log = logging.getLogger(__name__)

NOT_YOURS = "this session's notebook is open only to its owner and admins; sign in as one of them"
HOW_TO_OPEN = ("open this session's notebook from the dashboard (Sessions page, Open), which lets this browser in;"
               " scripts send 'Authorization: Bearer <token>'")


class Refusal(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = detail


class NotebookOrigin:
    """The ASGI app `serve` runs on ``GPUFLEET_SESSIONS_PORT``: notebooks and nothing else."""

    def __init__(self, settings: Settings, locate: Locator | None = None):
        self.settings = settings
        self.locate = locate or notebook_of_session
        self.tickets = RedisLimiter(settings.redis_url) if settings.redis_url else MemoryLimiter()
        # No read timeout: a notebook answers long polls and streams when it has something to say.
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0), follow_redirects=False,
                                        trust_env=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return
        parsed = split_path(scope["path"])
        try:
            if parsed is None:
                raise Refusal(404, "this address serves sessions' notebooks only, at /sessions/{id}/")
            self._check_host(scope, parsed[0])
            notebook, user, by_ticket = await self._admit(scope, parsed[0])
        except Refusal as exc:
            await _refuse(scope, receive, send, exc)
            return
        if by_ticket:
            await self._let_in(scope, parsed[0], user)(scope, receive, send)
            return
        try:
            upstream = upstream_for(self.settings, notebook)
        except Unreachable as exc:
            await _refuse(scope, receive, send, Refusal(502, str(exc)))
            return
        if scope["path"] == PREFIX + parsed[0] and scope["type"] == "http":
            # The notebook's base URL ends with a slash; its relative links need it.
            await RedirectResponse(scope["path"] + "/", status_code=307)(scope, receive, send)
        elif scope["type"] == "http":
            await forward_http(self.client, scope, receive, send, upstream, notebook.token,
                               shape=lambda headers: answer_headers(headers, scope["path"]))
        else:
            await forward_websocket(WebSocket(scope, receive, send), upstream)

    def _check_host(self, scope: Scope, session_id: str) -> None:
        host = Headers(scope=scope).get("host")
        wanted = expected_host(self.settings, session_id)
        name = host_name(host or "")
        if (wanted is not None and name != wanted.lower()) or (wanted is None and not host_allowed(host,
                                                                                                    self.settings)):
            raise Refusal(400, f"this server does not serve session {session_id}'s notebook under the host name"
                               f" {host!r} (GPUFLEET_SESSIONS_ORIGIN, GPUFLEET_ALLOWED_HOSTS)")

    async def _admit(self, scope: Scope, session_id: str) -> tuple[Notebook, AuthUser, bool]:
        """The notebook, who asks, and whether they came with a ticket (to trade for a cookie)."""
        user, by_ticket = await self._user(scope, session_id)
        if user is None:
            raise Refusal(403, HOW_TO_OPEN)
        notebook: Notebook | None = await to_thread.run_sync(self.locate, self.settings, session_id)
        if notebook is None:
            raise Refusal(404, f"there is no session {session_id!r}")
        if not may_open(user, notebook):
            raise Refusal(403, NOT_YOURS)
        if not notebook.reachable:
            raise Refusal(409, f"session {session_id} is {notebook.status}; its notebook is not running")
        return notebook, user, by_ticket

    async def _user(self, scope: Scope, session_id: str) -> tuple[AuthUser | None, bool]:
        """Who asks: a ticket's user, a token's, or this session's cookie's; and whether by a ticket."""
        headers = Headers(scope=scope)
        query = dict(parse_qsl((scope.get("query_string") or b"").decode("latin-1")))
        if TICKET_PARAM in query and scope["type"] == "http" and scope["method"] == "GET":
            found = await to_thread.run_sync(notebook_pass_user, self.settings, NOTEBOOK_TICKET_PURPOSE,
                                             query[TICKET_PARAM], session_id)
            if found is None or not self.tickets.claim_once(f"notebook-ticket:{found[1]}", TICKET_TTL_S + 5):
                raise Refusal(403, "this notebook link was used already or has expired; open the notebook from"
                                   " the dashboard again")
            return found[0], True
        if headers.get("authorization"):
            try:
                return await to_thread.run_sync(resolve_user, self.settings, "GET",
                                                {"authorization": headers["authorization"]}, {}), False
            except AuthError as exc:
                raise Refusal(403, exc.reason) from None
        secure = scope.get("scheme") in ("https", "wss")
        value = cookie_parser(headers.get("cookie", "")).get(cookie_name(session_id, secure))
        if not value:
            return None, False
        writes = scope["type"] == "websocket" or scope["method"] not in SAFE_METHODS
        if writes and not self._from_here(scope, headers):
            raise Refusal(403, "a request from another origin may not use this notebook's sign-in")
        found = await to_thread.run_sync(notebook_pass_user, self.settings, NOTEBOOK_COOKIE_PURPOSE, value,
                                         session_id)
        return (found[0] if found is not None else None), False

    def _from_here(self, scope: Scope, headers: Headers) -> bool:
        if headers.get("sec-fetch-site") in ("cross-site", "same-site"):
            return False
        scheme = {"ws": "http", "wss": "https"}.get(scope.get("scheme", "http"), scope.get("scheme", "http"))
        return same_origin(headers.get("origin"), scheme, headers.get("host"))

    def _let_in(self, scope: Scope, session_id: str, user: AuthUser) -> Response:
        """Trade a ticket for this session's cookie, and go to the same address without the ticket."""
        secure = scope.get("scheme") == "https"
        query = [(k, v) for k, v in parse_qsl((scope.get("query_string") or b"").decode("latin-1"))
                 if k != TICKET_PARAM]
        target = scope["path"] + (f"?{urlencode(query)}" if query else "")
        response = RedirectResponse(target, status_code=303)
        value = make_notebook_pass(self.settings, user, session_id, NOTEBOOK_COOKIE_PURPOSE,
                                   self.settings.session_ttl_s)
        response.set_cookie(cookie_name(session_id, secure), value, max_age=self.settings.session_ttl_s,
                            httponly=True, samesite="strict", secure=secure, path="/")
        response.headers["Referrer-Policy"] = "no-referrer"  # the ticket's URL stays out of Referer
        log.info("%s opened session %s's notebook", user.name, session_id)
        return response

    async def aclose(self) -> None:
        await self.client.aclose()


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
