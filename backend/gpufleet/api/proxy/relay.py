"""A GPU host's session relay: how a gpufleet server on another machine reaches a notebook here.

A session's Jupyter server listens on this host's loopback only. ``gpufleet
worker`` serves this small ASGI app on the host's address and
``GPUFLEET_SESSION_RELAY_PORT`` when that is set; it forwards a request under
``/sessions/{id}/`` to the loopback port that the request's
``X-Gpufleet-Relay`` grant names, and only when the grant is signed for that
session by a server holding the fleet's ``GPUFLEET_SECRET_KEY`` and is under
30 s old. The notebook's token travels in the request (the server adds it),
so the relay holds no state and reads no database. Everything else gets 403.
"""

from __future__ import annotations

import logging
import socket
import threading

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from gpufleet.api.proxy.forward import forward_http, proxy_client
from gpufleet.api.proxy.notebooks import split_path
from gpufleet.api.proxy.sockets import forward_websocket
from gpufleet.api.proxy.upstream import RELAY_HEADER, Upstream, relay_grant
from gpufleet.api.security.policy import secret_problem
from gpufleet.config import Settings

log = logging.getLogger(__name__)


class NotebookRelay:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.client = proxy_client()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return
        headers = Headers(scope=scope)
        parsed = split_path(scope["path"])
        port = relay_grant(self.settings, headers.get(RELAY_HEADER), parsed[0]) if parsed else None
        token = headers.get("authorization")
        if port is None:
            await self._refuse(scope, receive, send)
            return
        # No token: a request the server forwards as no one (a page's static files), as anyone here may send.
        upstream = Upstream(f"http://127.0.0.1:{port}", (("authorization", token),) if token else ())
        if scope["type"] == "http":
            await forward_http(self.client, scope, receive, send, upstream)
        else:
            await forward_websocket(WebSocket(scope, receive, send), upstream)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = JSONResponse({"detail": "this relay forwards only requests a gpufleet server signed"}, 403)
        if scope["type"] == "http":
            await response(scope, receive, send)
        else:
            await WebSocket(scope, receive, send).close(1008)


def relay_address(settings: Settings) -> str:
    """Where the relay listens: the address other hosts reach this one at."""
    if settings.advertise_address:
        return settings.advertise_address
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def start_relay(settings: Settings, stop: threading.Event) -> threading.Thread | None:
    """Serve the relay in a thread until ``stop`` is set; None (and a log line) when it must not run."""
    if not settings.session_relay_port:
        return None
    weak = secret_problem(settings.secret_key)
    if weak:
        log.error("session relay not started: GPUFLEET_SECRET_KEY %s, so anyone could sign a grant", weak)
        return None
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(NotebookRelay(settings), host=relay_address(settings),
                                           port=settings.session_relay_port, log_level="warning",
                                           lifespan="off", ws_per_message_deflate=False))

    def exit_on_stop() -> None:
        stop.wait()
        server.should_exit = True

    def run() -> None:
        threading.Thread(target=exit_on_stop, daemon=True).start()
        server.run()

    thread = threading.Thread(target=run, name="gpufleet-session-relay", daemon=True)
    thread.start()
    log.info("session relay on %s:%d", relay_address(settings), settings.session_relay_port)
    return thread
