"""The FastAPI app: every router, every request guard and every handler, put together here and nowhere else."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.middleware import Middleware

from gpufleet import __version__
from gpufleet.api import ws
from gpufleet.api.pagekey import HEADER as PAGE_KEY_HEADER
from gpufleet.api.loadshed import Admission, DatabaseOutage, pool_timeout, request_capacity
from gpufleet.api.docs import install_docs
from gpufleet.api.methods import method_not_allowed
from gpufleet.api.routes import (
    auth,
    booking_feeds,
    bookings,
    code,
    metrics,
    pools,
    recipes,
    runas,
    selection,
    sessions,
    sharing,
    sweeps,
    system,
    training_files,
    trainings,
    users,
    webhooks,
)
from gpufleet.api.idempotency import IdempotentCreates
from gpufleet.api.proxy import NotebooksElsewhere
from gpufleet.api.security.bodylimits import CODE_UPLOAD_PATH, SizeLimits
from gpufleet.api.security.gate import AuthGate
from gpufleet.api.security.headers import DashboardPolicy
from gpufleet.api.security.hosts import HostGuard
from gpufleet.api.security.inputs import NulGuard
from gpufleet.api.security.openapi import document_refusals
from gpufleet.wire.openapi import extra_components
from gpufleet.api.security.origins import cors_origins
from gpufleet.api.security.ratelimits import get_limiter
from gpufleet.api.static import install_static
from gpufleet.api.validation import validation_failed
from gpufleet.config import Settings, get_settings

log = logging.getLogger(__name__)

# The product's routers, in the order they are mounted (and listed in the OpenAPI document).
ROUTERS: tuple[APIRouter, ...] = (
    system.health_router,
    system.router,
    selection.router,
    trainings.router,
    pools.router,
    sessions.router,
    training_files.router,
    code.router,
    recipes.router,
    metrics.router,
    sweeps.router,
    sharing.router,
    runas.router,
    users.router,
    webhooks.router,
    bookings.router,
    booking_feeds.router,
    ws.router,
)


def request_guards(settings: Settings) -> list[Middleware]:
    """What every request passes before a route, outermost first.

    A request to a name this server does not answer to (DNS rebinding) is
    refused before anything else looks at it; an oversized body before it is
    buffered for the NUL check; both before the auth gate's database lookup.
    CORS, only when origins are configured, answers preflights outside them all.
    """
    guards = [
        Middleware(HostGuard, settings=settings),
        # Sessions' notebooks (/sessions/{id}/) are served on their own origin, never this one.
        Middleware(NotebooksElsewhere),
        Middleware(DashboardPolicy),
        Middleware(SizeLimits, max_body=settings.max_request_bytes, max_ws_message=settings.max_ws_message_bytes,
                   path_limits={CODE_UPLOAD_PATH: settings.code_max_bytes}),
        # A code archive is binary: NUL bytes are its content, not an attack on text columns.
        Middleware(NulGuard, binary_paths=frozenset({CODE_UPLOAD_PATH})),
        Middleware(AuthGate, settings=settings),
        # Inside the gate: a create's key belongs to the user the gate found.
        Middleware(IdempotentCreates, settings=settings),
    ]
    if settings.cors_origins:
        guards.insert(0, Middleware(CORSMiddleware, allow_origins=cors_origins(settings), allow_credentials=True,
                                    allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
                                    allow_headers=["Authorization", "Content-Type", "Idempotency-Key",
                                                   PAGE_KEY_HEADER]))
    return guards


def create_app(settings: Settings | None = None, *, background: bool = False) -> FastAPI:
    """Build the API.

    ``background=True`` (what ``gpufleet serve`` passes) also runs, inside this
    process, the scheduler loop and, in the embedded default, the agent that
    registers this host and samples its GPUs. Tests build the app without them.
    """
    settings = settings or get_settings()
    stop = threading.Event()
    threads: list[threading.Thread] = []

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        warming = None
        if background:
            threads.extend(start_background(settings, stop))
            warm = next((t for t in threads if t.name == WARM_THREAD), None)
            if warm is not None:
                # Ready means warm: torch's import holds the GIL for up to a second at a
                # time, so a server that answered before it would stall just after.
                await asyncio.to_thread(warm.join)
            if settings.estimate_warm:
                warming = asyncio.create_task(selection.warm_estimates(app, settings))
        try:
            yield
        finally:
            if warming is not None:
                warming.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await warming
            stop.set()
            for t in threads:
                t.join(timeout=10)
            pool = getattr(app.state, "estimate_pool", None)
            if pool is not None:
                pool.close()

    app = FastAPI(
        title="gpufleet",
        version=__version__,
        description="A team-shared GPU training server.",
        lifespan=lifespan,
        # Served from the package's own assets (api/docs.py), not a CDN.
        docs_url=None,
        redoc_url=None,
        # Outermost: a request past capacity costs no authentication and no connection.
        middleware=[Middleware(Admission, capacity=request_capacity(settings)), Middleware(DatabaseOutage),
                    *request_guards(settings)],
        exception_handlers={PoolTimeout: pool_timeout, 405: method_not_allowed},
    )
    _mount(app, settings, ROUTERS)
    install_docs(app)
    # Last: the dashboard's fallback answers only what no router does.
    install_static(app, settings)
    return app


def guarded_app(settings: Settings, *routers: APIRouter) -> FastAPI:
    """A bare app of ``routers`` behind the product's sign-in and request guards.

    For measuring and testing that layer on its own (tests/api/security, tests/fuzz,
    bench/auth_overhead.py): the same guards, auth routes and OpenAPI
    completion as :func:`create_app`, without its routers and background work.
    """
    app = FastAPI(middleware=request_guards(settings))
    _mount(app, settings, routers)
    return app


def _mount(app: FastAPI, settings: Settings, routers: Sequence[APIRouter]) -> None:
    app.state.settings = settings
    # A refusal never echoes what JSON cannot hold (NaN, Infinity): a 422, not a 500.
    app.add_exception_handler(RequestValidationError, validation_failed)
    get_limiter(app, settings)
    for router in (*routers, auth.router):
        app.include_router(router)
    document_refusals(app)
    _document_wire_types(app)


def _document_wire_types(app: FastAPI) -> None:
    """Name the live stream's frames and the statuses in the schema (no route returns them)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        schema = generate()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        if "LiveMessage" not in components:
            components.update(extra_components())
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


WARM_THREAD = "gpufleet-warm-torch"


def start_background(settings: Settings, stop: threading.Event) -> list[threading.Thread]:
    """The threads `serve` runs beside the API: the agent (embedded), the scheduler, the webhooks' sender."""
    from gpufleet.jobs.scheduler_loop import start as start_scheduler

    threads = []
    if settings.redis_url is None:
        # With no Redis the live stream is the in-process bus, so the agent
        # must live in this process (see docs/architecture.md).
        from gpufleet.telemetry.agent import start_agent

        threads.append(start_agent(settings, stop))
    threads.append(start_scheduler(settings, stop))
    from gpufleet.jobs.notify_loop import start as start_webhooks

    threads.append(start_webhooks(settings, settings, stop))
    from gpufleet.jobs import ckpt_uploads
    from gpufleet.jobs.pool_loop import start as start_pools

    from gpufleet.ckptstore import StoreError
    from gpufleet.config import ConfigError

    try:
        ckpt_uploads.start(settings, settings)  # the pools' checkpoints go to the store from here
    except StoreError as exc:
        raise ConfigError(str(exc)) from None
    threads.append(start_pools(settings, stop))
    # The memory estimate of a new training traces its model with torch. Load
    # torch while the rest starts rather than inside the first POST (about 4 s
    # here); importing it initialises no device. The lifespan waits for it before
    # the API answers. Off with the estimates' warm-up.
    if settings.estimate_warm:
        warm = threading.Thread(target=_warm_torch, name=WARM_THREAD, daemon=True)
        warm.start()
        threads.append(warm)
    return threads


def _warm_torch() -> None:
    import gpufleet.scheduling.memtrace  # noqa: F401
