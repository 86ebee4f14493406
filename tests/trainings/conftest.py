"""Fixtures for script trainings: the real app with sign-in on, people with roles."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from fastapi.testclient import TestClient

from people import SECRET, People, make_people
from gpufleet.api.app import create_app
from gpufleet.config import Settings
from servers import serve_inprocess


@pytest.fixture
def on_settings(db_settings: Settings) -> Settings:
    return db_settings.model_copy(update={"auth": "on", "secret_key": SECRET, "code_max_bytes": 64 * 1024})


@pytest.fixture
def people(on_settings: Settings) -> People:
    return make_people(on_settings, suffix="-" + uuid.uuid4().hex[:6])


@pytest.fixture
def app_client(on_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(on_settings)) as c:
        yield c


# The jobs suite's real worker, scheduler and helpers, shared here.
from jobs.conftest import scheduler, workers  # noqa: E402, F401


@pytest.fixture
def live_server() -> Iterator:
    """The whole app (trainings, code, ...) under uvicorn on a free port, with this host's agent
    (heartbeats keep the host schedulable, as under `gpufleet serve`); returns its base URL."""
    import threading

    from gpufleet.telemetry.agent import start_agent

    stop = threading.Event()
    agents: list[threading.Thread] = []

    def start(settings: Settings) -> str:
        agents.append(start_agent(settings, stop))
        return stack.enter_context(serve_inprocess(create_app(settings))).url

    with ExitStack() as stack:
        yield start
    stop.set()
    for a in agents:
        a.join(10)
