"""``Idempotency-Key`` on the API's creates: a retried create gets the first answer, never a second row.

A client that sent ``POST /api/v1/trainings`` and saw no answer (a timeout, a
dropped connection) cannot know whether the training was created. With an
``Idempotency-Key`` header (any string up to 255 characters; a UUID is usual)
it sends the same request again with the same key and gets:

- the first answer (its status and body, and ``Idempotent-Replayed: true``)
  when the first request succeeded, within 24 hours;
- what running it now gives, when the first was refused (a refusal wrote nothing);
- 409 when the key was used with another body (a client bug: a new request needs a new key);
- 409 with ``Retry-After`` while the first request is still being answered.

Keys belong to the signed-in user (two users' keys never meet) and to one
endpoint, and are stored in the database (:mod:`gpufleet.users.idempotency`),
so every API process behind the proxy answers a retry alike. The body is
compared as JSON (key order and spacing do not matter) when it is JSON.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

from anyio import to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpufleet.api.security.asgi import send_error
from gpufleet.api.security.gate import STATE_KEY
from gpufleet.config import Settings
from gpufleet.users import idempotency as store

HEADER = b"idempotency-key"
MAX_KEY = 255
# The creates that take a key: every POST that makes a row a person would not want twice.
CREATES = frozenset({"/api/v1/trainings", "/api/v1/trainings/batch", "/api/v1/sessions", "/api/v1/sweeps"})
# How long a retry waits for the first request with its key to answer before it is told to come back.
WAIT_FOR_FIRST_S = 10.0


def fingerprint(body: bytes) -> str:
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()
    except (ValueError, UnicodeDecodeError):
        canonical = body
    return hashlib.sha256(canonical).hexdigest()


async def _read_body(receive: Receive) -> tuple[bytes, list[Message]]:
    chunks, messages = [], []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks), messages


class IdempotentCreates:
    """ASGI middleware, inside the auth gate (it needs the user the gate found)."""

    def __init__(self, app: ASGIApp, settings: Settings):
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = _key(scope)
        if key is None:
            await self.app(scope, receive, send)
            return
        user = scope.get("state", {}).get(STATE_KEY)
        if len(key) > MAX_KEY or not key.strip():
            await send_error(send, 400, f"the Idempotency-Key header must be 1 to {MAX_KEY} characters")
            return
        if user is None:  # the gate refuses these first; never key a request to nobody
            await self.app(scope, receive, send)
            return
        body, messages = await _read_body(receive)
        ids = (user.name, f"POST {scope['path']}", key)
        found = await self._claim(ids, fingerprint(body))
        if found.state == "done":
            await _send_json(send, found.status_code or 200, found.response, [(b"idempotent-replayed", b"true")])
            return
        if found.state == "conflict":
            await send_error(send, 409, "this Idempotency-Key was used with another request body; a new request "
                                        "needs a new key")
            return
        if found.state == "running":
            await send_error(send, 409, "a request with this Idempotency-Key is still being answered; send it "
                                        "again in a few seconds", [(b"retry-after", b"2")])
            return
        await self._run_and_keep(scope, receive, messages, send, ids)

    async def _claim(self, ids: tuple[str, str, str], fp: str) -> store.Claim:
        waited = 0.0
        while True:
            found = await to_thread.run_sync(store.claim, self.settings, *ids, fp)
            if found.state != "running" or waited >= WAIT_FOR_FIRST_S:
                return found
            await asyncio.sleep(0.25)
            waited += 0.25

    async def _run_and_keep(self, scope: Scope, receive: Receive, messages: list[Message], send: Send,
                            ids: tuple[str, str, str]) -> None:
        pending = list(messages)

        async def replay() -> Message:
            # The body read already, then the client's own next message (its disconnect).
            return pending.pop(0) if pending else await receive()

        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            # Held back until the answer is stored: a client gone by then (its timeout) must find it on retry.
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        kept = False
        try:
            await self.app(scope, replay, capture)
            status = int(start.get("status", 500))
            if 200 <= status < 300:
                response = json.loads(b"".join(chunks) or b"null")
                await to_thread.run_sync(store.keep, self.settings, *ids, status, response)
                kept = True
        finally:
            if not kept:
                await to_thread.run_sync(store.release, self.settings, *ids)
        await send(start)
        await send({"type": "http.response.body", "body": b"".join(chunks)})


def _key(scope: Scope) -> str | None:
    if scope["type"] != "http" or scope["method"] != "POST" or scope["path"].rstrip("/") not in CREATES:
        return None
    for name, value in scope.get("headers", []):
        if name == HEADER:
            return value.decode("latin-1")
    return None


async def _send_json(send: Send, status: int, payload: Any, headers: list[tuple[bytes, bytes]]) -> None:
    body = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})
