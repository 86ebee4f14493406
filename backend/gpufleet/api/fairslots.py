"""Admission slots shared fairly between callers, so one caller's flood slows only that caller.

A process serves ``capacity`` requests at once (:mod:`gpufleet.api.loadshed`
says why). Counted for everyone together, a viewer with 16 threads held every
slot and everyone else got 429. Here each caller (one credential: see
:func:`caller_key`) has a fair part: the capacity divided by the callers with a
request in progress or waiting. While slots are free anyone takes one, so a
caller alone may use them all. When none is free:

- a caller below its fair part waits (holding no database connection) for the
  next slot that frees, at most ``wait_s``; waiting callers get freed slots
  before anyone new, the one holding fewest first;
- a caller at or above its fair part is refused at once (429 and
  ``Retry-After``), so its flood cannot push out the others.

One event loop per process: nothing here needs a lock.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import deque

from starlette.types import Scope

from gpufleet.api.unixsocket import PEER_KEY

SESSION_COOKIE = b"gpufleet_session="


class FairSlots:
    def __init__(self, capacity: int, wait_s: float) -> None:
        self.capacity = capacity
        self.wait_s = wait_s
        self.in_flight = 0
        self.held: dict[str, int] = {}
        # Insertion-ordered: among waiting callers holding as many slots, the first to wait goes first.
        self.waiting: dict[str, deque[asyncio.Future[bool]]] = {}

    def fair_part(self, key: str) -> int:
        """Slots ``key`` may count on while others want them too."""
        active = len(self.held.keys() | self.waiting.keys() | {key})
        return max(1, self.capacity // active)

    def callers(self) -> int:
        return len(self.held.keys() | self.waiting.keys())

    async def acquire(self, key: str) -> bool:
        """Take a slot for ``key`` (True), or False: refused at once, or no slot freed in ``wait_s``."""
        if self.in_flight < self.capacity and not self.waiting:
            self._take(key)
            return True
        queue = self.waiting.get(key)
        if self.held.get(key, 0) + (len(queue) if queue else 0) >= self.fair_part(key):
            return False
        loop = asyncio.get_running_loop()
        granted: asyncio.Future[bool] = loop.create_future()
        self.waiting.setdefault(key, deque()).append(granted)
        timer = loop.call_later(self.wait_s, self._expire, key, granted)
        try:
            return await granted
        except asyncio.CancelledError:
            # The client went away while waiting; a slot granted in that same instant is handed on.
            self._forget(key, granted)
            if granted.done() and not granted.cancelled() and granted.result():
                self.release(key)
            raise
        finally:
            timer.cancel()

    def release(self, key: str) -> None:
        self.in_flight -= 1
        left = self.held[key] - 1
        if left:
            self.held[key] = left
        else:
            del self.held[key]
        self._hand_on()

    def _take(self, key: str) -> None:
        self.in_flight += 1
        self.held[key] = self.held.get(key, 0) + 1

    def _hand_on(self) -> None:
        while self.in_flight < self.capacity and self.waiting:
            key = min(self.waiting, key=lambda k: self.held.get(k, 0))
            granted = self.waiting[key].popleft()
            if not self.waiting[key]:
                del self.waiting[key]
            self._take(key)
            granted.set_result(True)

    def _expire(self, key: str, granted: asyncio.Future[bool]) -> None:
        if not granted.done():
            self._forget(key, granted)
            granted.set_result(False)

    def _forget(self, key: str, granted: asyncio.Future[bool]) -> None:
        queue = self.waiting.get(key)
        if queue is not None and granted in queue:
            queue.remove(granted)
            if not queue:
                del self.waiting[key]


def caller_key(scope: Scope) -> str:
    """Who a request comes from, without the database: its token, its session cookie, its Unix account
    connected to the socket, else its address. Hashed, so no credential stays in memory in the clear."""
    auth = cookie = b""
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            auth = value
        elif name == b"cookie" and SESSION_COOKIE in value:
            cookie = value.split(SESSION_COOKIE, 1)[1].split(b";", 1)[0]
    if auth:
        return "token:" + hashlib.sha256(auth).hexdigest()[:24]
    if cookie:
        return "session:" + hashlib.sha256(cookie).hexdigest()[:24]
    peer = (scope.get("extensions") or {}).get(PEER_KEY)
    if peer is not None:
        return f"uid:{peer.uid}"
    client = scope.get("client")
    return f"addr:{client[0]}" if client else "addr:?"
