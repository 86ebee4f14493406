"""Admission: a burst beyond what the process can serve gets a fast 429, never a 5xx.

Every request under ``/api/`` uses one database connection (the auth gate's
lookup, then the route's session, one after the other). Admitting more
requests at once than the pool holds only makes them queue for a connection
until the pool times out (a 500 after 30 s); admitting more than a few per
core only makes every one of them slower. So at most
``max_concurrent_requests`` are served at once per process; the next one is
answered at once with 429 and ``Retry-After``, before it touches the database,
and nothing is written. Clients that honour ``Retry-After`` (the CLI, the
dashboard) get their request through.

A pool timeout that happens anyway (background threads share the pool) is
answered the same way.
"""

from __future__ import annotations

import os

from fastapi import Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.types import ASGIApp, Receive, Scope, Send

from gpufleet.api.security.asgi import is_gated, send_error
from gpufleet.config import Settings

RETRY_AFTER_S = 1
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


def request_capacity(settings: Settings) -> int:
    """Requests served at once: the setting, else what the pool and the cores allow."""
    if settings.max_concurrent_requests:
        return settings.max_concurrent_requests
    pool = settings.db_pool_size + settings.db_max_overflow - BACKGROUND_CONNECTIONS
    cores = REQUESTS_PER_CORE * (os.cpu_count() or 1)
    return max(2, min(pool, cores))


class Admission:
    def __init__(self, app: ASGIApp, capacity: int):
        self.app = app
        self.capacity = capacity
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_gated(scope["path"]) or scope["path"] in OWN_QUEUE:
            await self.app(scope, receive, send)
            return
        # One event loop per process: the counter needs no lock.
        if self.in_flight >= self.capacity:
            await send_error(send, 429, _busy(self.capacity), [(b"retry-after", str(RETRY_AFTER_S).encode())])
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


def _busy(capacity: int) -> str:
    return (f"the server is serving {capacity} requests at once, the most it takes "
            f"(GPUFLEET_MAX_CONCURRENT_REQUESTS); nothing was done: retry after {RETRY_AFTER_S} s")


async def pool_timeout(request: Request, exc: PoolTimeout) -> JSONResponse:
    return JSONResponse({"detail": "the server has no free database connection now; nothing was done: "
                                   f"retry after {RETRY_AFTER_S} s"},
                        status_code=429, headers={"Retry-After": str(RETRY_AFTER_S)})
