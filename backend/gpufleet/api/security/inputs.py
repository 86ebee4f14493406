"""Refuse NUL characters anywhere in a request, before any route sees them.

PostgreSQL cannot store U+0000 in text and its driver raises on it, so a
``\\x00`` in a host name, an owner filter or a training's name would turn into
a 500 on a fleet while SQLite took it. No gpufleet input has a use for it, so
it is refused the same way on both databases: a 422 that says where it was.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpufleet.api.security.asgi import send_error

_NUL_MARKERS = (b"%00", b"\x00")


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def body_has_nul(body: bytes) -> bool:
    if b"\x00" in body:
        return True
    # Only a body that might spell one as a JSON escape is parsed to make sure.
    if b"\\u0000" not in body:
        return False
    try:
        return _has_nul(json.loads(body))
    except ValueError:
        return False


class NulGuard:
    def __init__(self, app: ASGIApp, binary_paths: frozenset[str] = frozenset()):
        self.app = app
        # Routes whose body is binary (checked by the route itself); path and query are still checked.
        self.binary_paths = binary_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        where = None
        if "\x00" in scope["path"]:
            where = "the path"
        elif any(m in scope.get("query_string", b"").lower() for m in _NUL_MARKERS):
            where = "the query string"
        if where is None and scope["method"] in ("POST", "PUT", "PATCH") and scope["path"] not in self.binary_paths:
            # The body is bounded by SizeLimits outside this middleware.
            chunks: list[bytes] = []
            more = True
            while more:
                message = await receive()
                if message["type"] != "http.request":
                    break
                chunks.append(message.get("body", b""))
                more = message.get("more_body", False)
            body = b"".join(chunks)
            if body_has_nul(body):
                where = "the body"
            else:
                replayed = False

                async def replay() -> Message:
                    nonlocal replayed
                    if not replayed:
                        replayed = True
                        return {"type": "http.request", "body": body, "more_body": False}
                    return await receive()

                await self.app(scope, replay, send)
                return
        if where is not None:
            await send_error(send, 422, f"{where} contains a NUL character (U+0000); gpufleet takes no such input")
            return
        await self.app(scope, receive, send)
