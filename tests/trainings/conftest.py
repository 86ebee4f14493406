"""Fixtures for script trainings: the real app with sign-in on (``tests/conftest.py``'s
``on_settings``, ``people``, ``app_client``), with room for a script's code."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from gpufleet.api.app import create_app
from gpufleet.config import Settings
from support.servers import serve_inprocess


@pytest.fixture
def on_settings(on_settings: Settings) -> Settings:
    return on_settings.model_copy(update={"code_max_bytes": 64 * 1024})


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
