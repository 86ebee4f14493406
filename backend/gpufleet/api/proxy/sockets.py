"""Forward one WebSocket (a kernel's channels, a terminal) between the browser and a notebook.

The notebook is connected first, with the subprotocols the browser offered,
so the browser is accepted with the one the notebook chose; then frames go
both ways as they come, and a close on either side closes the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from gpufleet.api.proxy.forward import request_headers, target_url
from gpufleet.api.proxy.upstream import Upstream

log = logging.getLogger(__name__)

# What the WebSocket client sets itself, beside the hop-by-hop headers that request_headers drops.
_HANDSHAKE = frozenset({"origin", "user-agent"})


def _sendable(code: int | None) -> int:
    """A close code one may send: 1005 (none given) and 1006 (connection lost) only describe a close."""
    if code is None or code == 1005:
        return 1000
    return 1011 if code == 1006 else code


def _offered_subprotocols(websocket: WebSocket) -> list[str]:
    return [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",") if p.strip()]


async def _to_notebook(websocket: WebSocket, notebook: ClientConnection) -> None:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            await notebook.close(_sendable(message.get("code")))
            return
        data = message.get("bytes") if message.get("bytes") is not None else message.get("text")
        if data is not None:
            await notebook.send(data)


async def _to_browser(websocket: WebSocket, notebook: ClientConnection) -> None:
    try:
        async for data in notebook:
            if isinstance(data, bytes):
                await websocket.send_bytes(data)
            else:
                await websocket.send_text(data)
    except ConnectionClosed:
        pass
    with contextlib.suppress(RuntimeError, WebSocketDisconnect):
        await websocket.close(_sendable(notebook.close_code))


async def forward_websocket(websocket: WebSocket, upstream: Upstream) -> None:
    headers = [(n, v) for n, v in request_headers(websocket.scope, upstream) if n not in _HANDSHAKE]
    url = target_url(websocket.scope, upstream.ws_origin)
    try:
        notebook = await connect(url, additional_headers=headers, origin=upstream.origin,  # type: ignore[arg-type]
                                 subprotocols=_offered_subprotocols(websocket) or None,  # type: ignore[arg-type]
                                 max_size=None, compression=None, open_timeout=15)
    except (OSError, InvalidHandshake, asyncio.TimeoutError) as exc:
        status = exc.response.status_code if isinstance(exc, InvalidStatus) else None
        log.info("notebook WebSocket at %s refused: %s", url, exc)
        await websocket.close(1011 if status is None else 1008, "the session's notebook did not accept the socket")
        return
    async with notebook:
        await websocket.accept(subprotocol=notebook.subprotocol)
        tasks = [asyncio.create_task(_to_notebook(websocket, notebook)),
                 asyncio.create_task(_to_browser(websocket, notebook))]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, ConnectionClosed, WebSocketDisconnect, RuntimeError):
                    await task
