"""Fixtures for sessions: the product's app with sign-in on and people with roles; the jobs suite's real workers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.config import Settings
from people import SECRET, People, make_people


@pytest.fixture
def on_settings(db_settings: Settings) -> Settings:
    return db_settings.model_copy(update={"auth": "on", "secret_key": SECRET, "session_max_hours": 8.0})


@pytest.fixture
def people(on_settings: Settings) -> People:
    return make_people(on_settings, suffix="-" + uuid.uuid4().hex[:6])


@pytest.fixture
def app_client(on_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(on_settings)) as c:
        yield c


# The jobs suite's real worker and scheduler loop, shared here.
from jobs.conftest import scheduler, workers  # noqa: E402, F401
