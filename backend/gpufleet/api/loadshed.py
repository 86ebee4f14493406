"""Load shedding: a burst beyond what the process can serve gets a fast 429, never a 5xx; one caller's
flood slows only that caller. (Requests, not trainings: what admits a training is trainings/admission.)

Every request under ``/api/`` uses one database connection (the auth gate's
lookup, then the route's session, one after the other). Admitting more
requests at once than the pool holds only makes them queue for a connection
until the pool times out (a 500 after 30 s); admitting more than a few per
core only makes every one of them slower. So at most
``max_concurrent_requests`` are served at once per process; the next one is
answered at once with 429 and ``Retry-After``, before it touches the database,
and nothing is written. Clients that honour ``Retry-After`` (the CLI, the
dashboard) get their request through. The slots are shared fairly between
callers (:mod:`gpufleet.api.fairslots`): a caller below its fair part waits a
moment for the next free slot instead of being refused.

A pool timeout that happens anyway (background threads share the pool) is
answered the same way.
"""

from __future__ import annotations

import logging
import os
import time

from fastapi import Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpufleet.api.fairslots import FairSlots, caller_key
from gpufleet.api.security.asgi import is_gated, send_error
from gpufleet.config import Settings

log = logging.getLogger(__name__)

RETRY_AFTER_S = 1
# The database away (restarting, failing over, unreachable): long enough not
# to hammer it, short enough that a client's retry lands soon after it is back.
OUTAGE_RETRY_AFTER_S = 5
# Connections kept for what runs beside the requests: the scheduler loop and
# its advisory lock, the agent, the live training feeds.
BACKGROUND_CONNECTIONS = 6
# Requests are mostly Python under one interpreter lock: more of them at once
# than a few per core only makes each one slower (bench/create_burst.py).
REQUESTS_PER_CORE = 4
# Routes that wait in a bounded queue of their own, holding no connection while
# they wait: the memory estimates (a few worker processes, 16 waiting, a rate
# per user; scheduling/memory_pool.py). Counted here, a burst of estimates from
# one viewer would take every slot and turn everyone else's reads into 429s.
OWN_QUEUE = frozenset({"/api/v1/system/gpus/recommend", "/api/v1/system/gpus/validate"})
# How long a caller below its fair part waits for a slot: a few requests' time
# on a loaded server, short enough that a client's own timeout never comes first.
FAIR_WAIT_S = 3.0


def request_capacity(settings: Settings) -> int:
    """Requests served at once: the setting, else what the pool and the cores allow."""
    if settings.max_concurrent_requests:
        return settings.max_concurrent_requests
    pool = settings.db_pool_size + settings.db_max_overflow - BACKGROUND_CONNECTIONS
    cores = REQUESTS_PER_CORE * (os.cpu_count() or 1)
    return max(2, min(pool, cores))


class Admission:
    def __init__(self, app: ASGIApp, capacity: int, wait_s: float = FAIR_WAIT_S):
        self.app = app
        self.capacity = capacity
        self.slots = FairSlots(capacity, wait_s)

    @property
    def in_flight(self) -> int:
        return self.slots.in_flight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_gated(scope["path"]) or scope["path"] in OWN_QUEUE:
            await self.app(scope, receive, send)
            return
        key = caller_key(scope)
        if not await self.slots.acquire(key):
            await send_error(send, 429, _busy(self.capacity, self.slots.callers()),
                             [(b"retry-after", str(RETRY_AFTER_S).encode())])
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.slots.release(key)


def _busy(capacity: int, callers: int) -> str:
    return (f"the server is serving {capacity} requests at once, the most it takes "
            f"(GPUFLEET_MAX_CONCURRENT_REQUESTS), shared fairly between the {callers} callers sending them;"
            f" nothing was done: retry after {RETRY_AFTER_S} s")


async def pool_timeout(request: Request, exc: PoolTimeout) -> JSONResponse:
    return JSONResponse({"detail": "the server has no free database connection now; nothing was done: "
                                   f"retry after {RETRY_AFTER_S} s"},
                        status_code=429, headers={"Retry-After": str(RETRY_AFTER_S)})


class DatabaseOutage:
    """A request that finds the database unreachable gets 503 and ``Retry-After``, not a 500.

    Every request's work is one transaction, so a request cut off by the
    outage wrote nothing; the answer says so. Placed outside the auth gate,
    whose lookup is the first to meet a stopped database. A response already
    under way cannot be replaced and is left to fail as it would.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._logged = -1e9  # one warning per 10 s, not one per request of an outage

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except (OperationalError, InterfaceError) as exc:
            if started:
                raise
            # The driver's words name the database's address: the log gets them, the client does not.
            now = time.monotonic()
            if now - self._logged > 10:
                self._logged = now
                log.warning("answering 503: the database is unavailable (%s)",
                            (str(exc.orig or exc).strip().splitlines() or ["?"])[0])
            await send_error(send, 503, "the database is unavailable now; nothing was done: "
                                        f"retry after {OUTAGE_RETRY_AFTER_S} s",
                             [(b"retry-after", str(OUTAGE_RETRY_AFTER_S).encode())])
