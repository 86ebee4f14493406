"""On the dashboard's origin, ``/sessions/{id}/…`` is no notebook: notebooks have an origin of their own.

A page a member serves must never run where the dashboard's cookie counts
(see :mod:`gpufleet.api.proxy.origin`), so the API's own listener answers a
notebook's path with 404 and says where notebooks are opened; the
dashboard's pages ``/sessions`` and ``/sessions/new`` are not notebooks and
pass through.
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from gpufleet.api.proxy.notebooks import split_path

ELSEWHERE = ("a session's notebook is served on an origin of its own, never the dashboard's: open it from the"
             " Sessions page (Open), or ask POST /api/v1/sessions/{id}/open for its address")


class NotebooksElsewhere:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or split_path(scope["path"]) is None:
            await self.app(scope, receive, send)
            return
        response = JSONResponse({"detail": ELSEWHERE}, status_code=404)
        if scope["type"] == "http":
            await response(scope, receive, send)
            return
        websocket = WebSocket(scope, receive, send)
        if "websocket.http.response" in scope.get("extensions", {}):
            await websocket.send_denial_response(response)
        else:
            await websocket.close(1008, "notebooks are served on their own origin")
