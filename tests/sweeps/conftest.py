"""Fixtures for sweeps: an app with the sweeps routes (the fleet, workers and scheduler come from support.fleet)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from gpufleet.config import Settings

TINY_MLP = {"max_steps": 8, "global_batch_size": 16, "log_every": 1, "checkpoint_every": 1000,
            "synthetic_samples": 256, "hidden": [8]}


def sweeps_app(settings: Settings) -> FastAPI:
    from gpufleet.api.routes import sweeps, trainings

    app = FastAPI()
    app.state.settings = settings
    app.include_router(sweeps.router)
    app.include_router(trainings.router)
    return app


@pytest.fixture
def sweep_client() -> Iterator[Callable[[Settings], TestClient]]:
    clients: list[TestClient] = []

    def make(settings: Settings) -> TestClient:
        c = TestClient(sweeps_app(settings))
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()
