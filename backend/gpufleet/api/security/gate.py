"""The auth gate: no request under /api/ (or /metrics) reaches a route without a user.

Routes still declare what they need (`CurrentUser`, `MemberUser`, …), but a
route that forgot to must not become an open door: the gate authenticates
every HTTP request under ``/api/`` (except signing in and out) and the
Prometheus exposition at ``/metrics`` (scrape it with a viewer's token), and keeps the
user in the request's state, where the dependencies pick it up without a
second database round trip.

A download is a navigation, which sends the cookie but never the page key: a
``GET`` of a training's file with a ``ticket`` query parameter is the one
request the gate lets a single-use download ticket sign
(:mod:`gpufleet.api.pagekey`).
"""

from __future__ import annotations

from anyio import to_thread
from starlette.datastructures import Headers
from starlette.datastructures import QueryParams
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Receive, Scope, Send

from gpufleet.api import pagekey
from gpufleet.api.auth import AuthError, download_user, resolve_user
from gpufleet.api.security.asgi import is_gated, send_error
from gpufleet.api.unixsocket import scope_peer
from gpufleet.config import Settings

STATE_KEY = "gpufleet_user"


class AuthGate:
    def __init__(self, app: ASGIApp, settings: Settings):
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_gated(scope["path"]):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        ticket = QueryParams(scope.get("query_string", b"")).get("ticket")
        if ticket and scope["method"] in ("GET", "HEAD") and pagekey.downloadable(scope["path"]):
            user = await to_thread.run_sync(download_user, scope.get("app"), self.settings, ticket, scope["path"])
            if user is None:
                await send_error(send, 401, "this download link was used already or has expired (it opens one"
                                            " download, within seconds): ask the dashboard for the file again")
                return
            scope.setdefault("state", {})[STATE_KEY] = user
            await self.app(scope, receive, send)
            return
        cookies = cookie_parser(headers.get("cookie", ""))
        try:
            # The lookup touches the database; keep it off the event loop.
            user = await to_thread.run_sync(resolve_user, self.settings, scope["method"], headers, cookies,
                                            scope_peer(scope), scope.get("scheme") == "https")
        except AuthError as exc:
            extra = [(b"www-authenticate", b"Bearer")] if exc.status == 401 else []
            await send_error(send, exc.status, exc.reason, extra)
            return
        scope.setdefault("state", {})[STATE_KEY] = user
        await self.app(scope, receive, send)
