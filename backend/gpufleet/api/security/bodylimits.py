"""Body limits: request bodies and WebSocket messages over their size are refused before a route reads them."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpufleet.api.security.asgi import send_error

CODE_UPLOAD_PATH = "/api/v1/code"


class SizeLimits:
    """Refuse request bodies over ``max_request_bytes`` (413) and WebSocket
    messages over ``max_ws_message_bytes`` (close 1009), before a route reads them."""

    def __init__(self, app: ASGIApp, max_body: int, max_ws_message: int, path_limits: dict[str, int] | None = None):
        self.app = app
        self.max_body = max_body
        self.max_ws_message = max_ws_message
        # Routes that take uploads (code archives) have their own limit.
        self.path_limits = path_limits or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    def _body_error(self, limit: int) -> str:
        setting = "GPUFLEET_CODE_MAX_BYTES" if limit != self.max_body else "GPUFLEET_MAX_REQUEST_BYTES"
        return f"request body is larger than {limit} bytes ({setting})"

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        max_body = self.path_limits.get(scope["path"], self.max_body)
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await send_error(send, 400, "the Content-Length header is not a number")
                    return
                if declared > max_body:
                    await send_error(send, 413, self._body_error(max_body))
                    return
        seen = 0
        started = False
        refused = False

        async def counted_receive() -> Message:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > max_body and not started:
                    # Answer now and tell the route the client is gone; whatever
                    # it answers after that is dropped (an exception raised here
                    # would be turned into a 400 by FastAPI's body parsing).
                    refused = True
                    await send_error(send, 413, self._body_error(max_body))
                    return {"type": "http.disconnect"}
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if refused:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, counted_receive, tracked_send)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        closed = False

        async def bounded_receive() -> Message:
            nonlocal closed
            if closed:
                return {"type": "websocket.disconnect", "code": 1009}
            message = await receive()
            if message["type"] == "websocket.receive":
                size = len(message.get("bytes") or b"") + len((message.get("text") or "").encode("utf-8"))
                if size > self.max_ws_message:
                    closed = True
                    # 1009: message too big. The route sees a disconnect and ends.
                    await send({"type": "websocket.close", "code": 1009, "reason": "message too large"})
                    return {"type": "websocket.disconnect", "code": 1009}
            return message

        async def guarded_send(message: Message) -> None:
            if not closed:
                await send(message)

        await self.app(scope, bounded_receive, guarded_send)
