"""The ASGI layer that answers ``/sessions/{id}/…``: who may, where it goes, then forward.

It sits right after the host-name guard (``api/app.py``), so a notebook is
served only under the names the API is; it authenticates like the API
(``resolve_user`` for HTTP, ``authenticate_websocket`` for WebSockets: a
cookie counts only from an allowed Origin) and refuses everyone but the
session's owner and admins with 403 — the unauthenticated too, and a
refused WebSocket with an HTTP 403 before any handshake. Body and message
limits and the NUL guard are the API's and do not apply: a notebook saves
large files and speaks its own protocol.
"""

from __future__ import annotations

import httpx
from anyio import to_thread
from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import JSONResponse, RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from gpufleet.api.auth import AuthError, AuthUser, authenticate_websocket, resolve_user
from gpufleet.api.proxy.forward import forward_http
from gpufleet.api.proxy.notebooks import PREFIX, Notebook, may_open, split_path
from gpufleet.api.proxy.sessions_source import locator_of
from gpufleet.api.proxy.sockets import forward_websocket
from gpufleet.api.proxy.upstream import Unreachable, Upstream, upstream_for
from gpufleet.api.unixsocket import scope_peer
from gpufleet.config import Settings

NOT_YOURS = "this session's notebook is open only to its owner and admins; sign in as one of them"


class Refusal(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = detail


class SessionProxy:
    def __init__(self, app: ASGIApp, settings: Settings):
        self.app = app
        self.settings = settings
        self._client: httpx.AsyncClient | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            # No read timeout: a notebook answers long polls and streams when it has something to say.
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0), follow_redirects=False,
                                             trust_env=False)
        return self._client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, self._closing_on_shutdown(send))
            return
        parsed = split_path(scope["path"]) if scope["type"] in ("http", "websocket") else None
        if parsed is None:
            # Not a notebook: the API, or the dashboard's own pages (/sessions, /sessions/new).
            await self.app(scope, receive, send)
            return
        try:
            notebook, upstream = await self._admit(scope, parsed[0])
        except Refusal as exc:
            await self._refuse(scope, receive, send, exc)
            return
        if scope["path"] == PREFIX + parsed[0] and scope["type"] == "http":
            # The notebook's base URL ends with a slash; its relative links need it.
            await RedirectResponse(scope["path"] + "/", status_code=307)(scope, receive, send)
        elif scope["type"] == "http":
            await forward_http(self.client, scope, receive, send, upstream, notebook.token)
        else:
            await forward_websocket(WebSocket(scope, receive, send), upstream)

    async def _admit(self, scope: Scope, session_id: str) -> tuple[Notebook, Upstream]:
        user = await self._user(scope)
        if user is None:
            raise Refusal(403, "sign in to open a session's notebook")
        locate = locator_of(scope.get("app"))
        notebook: Notebook | None = await to_thread.run_sync(locate, self.settings, session_id)
        if notebook is None:
            raise Refusal(404, f"there is no session {session_id!r}")
        if not may_open(user, notebook):
            raise Refusal(403, NOT_YOURS)
        if not notebook.reachable:
            raise Refusal(409, f"session {session_id} is {notebook.status}; its notebook is not running")
        try:
            return notebook, upstream_for(self.settings, notebook)
        except Unreachable as exc:
            raise Refusal(502, str(exc)) from None

    async def _user(self, scope: Scope) -> AuthUser | None:
        if scope["type"] == "websocket":
            return await to_thread.run_sync(authenticate_websocket, WebSocket(scope, _no_receive, _no_send),
                                            self.settings)
        headers = Headers(scope=scope)
        try:
            return await to_thread.run_sync(resolve_user, self.settings, scope["method"], headers,
                                            cookie_parser(headers.get("cookie", "")), scope_peer(scope))
        except AuthError as exc:
            if exc.status == 403:
                raise Refusal(403, exc.reason) from None
            return None

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, refusal: Refusal) -> None:
        response = JSONResponse({"detail": refusal.detail}, status_code=refusal.status)
        if scope["type"] == "http":
            await response(scope, receive, send)
            return
        websocket = WebSocket(scope, receive, send)
        if "websocket.http.response" in scope.get("extensions", {}):
            await websocket.send_denial_response(response)
        else:
            await websocket.close(1008, refusal.detail[:120])

    def _closing_on_shutdown(self, send: Send) -> Send:
        async def wrapped(message: dict) -> None:  # type: ignore[type-arg]
            if message["type"] == "lifespan.shutdown.complete" and self._client is not None:
                await self._client.aclose()
                self._client = None
            await send(message)

        return wrapped


async def _no_receive() -> dict:  # type: ignore[type-arg]
    raise RuntimeError("authentication reads no message")


async def _no_send(message: dict) -> None:  # type: ignore[type-arg]
    raise RuntimeError("authentication sends no message")
