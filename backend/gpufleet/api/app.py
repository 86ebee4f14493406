"""The FastAPI app factory."""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from gpufleet import __version__
from gpufleet.config import Settings, get_settings

log = logging.getLogger(__name__)

# Routers of the domain folders, in the order they are mounted.
_ROUTERS = (
    "gpufleet.api.routes.system:health_router",
    "gpufleet.api.routes.system:router",
    "gpufleet.api.routes.selection:router",
    "gpufleet.api.routes.trainings:router",
    "gpufleet.api.routes.code:router",
    "gpufleet.api.routes.recipes:router",
    "gpufleet.api.routes.metrics:router",
    "gpufleet.api.ws:router",
)


def _load(spec: str):  # noqa: ANN202
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


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
        if background:
            threads.extend(start_background(settings, stop))
        try:
            yield
        finally:
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
    )
    app.state.settings = settings
    for spec in _ROUTERS:
        app.include_router(_load(spec))
    from gpufleet.api.auth import install as install_auth

    install_auth(app, settings)
    from gpufleet.api.docs import install_docs

    install_docs(app)
    from gpufleet.api.static import install_static

    install_static(app, settings)
    from gpufleet.api.admission import install_admission

    install_admission(app, settings)
    from gpufleet.api.methods import method_not_allowed

    app.add_exception_handler(405, method_not_allowed)
    return app


def start_background(settings: Settings, stop: threading.Event) -> list[threading.Thread]:
    """The threads `serve` runs beside the API: the agent (embedded) and the scheduler."""
    from gpufleet.jobs.scheduler_loop import start as start_scheduler

    threads = []
    if settings.redis_url is None:
        # With no Redis the live stream is the in-process bus, so the agent
        # must live in this process (see docs/architecture.md).
        from gpufleet.telemetry.agent import start_agent

        threads.append(start_agent(settings, stop))
    threads.append(start_scheduler(settings, stop))
    # The memory estimate of a new training traces its model with torch. Load
    # torch beside a running server rather than inside the first POST (about
    # 4 s here); importing it initialises no device.
    warm = threading.Thread(target=importlib.import_module, args=("gpufleet.scheduling.memtrace",),
                            name="gpufleet-warm-torch", daemon=True)
    warm.start()
    return threads
