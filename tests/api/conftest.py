from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.config import Settings
from gpufleet.db.session import upgrade_database
from gpufleet.telemetry.inventory import register_host


@pytest.fixture
def sim_app_settings(sim_settings: Settings) -> Settings:
    upgrade_database(sim_settings)
    register_host(sim_settings)
    return sim_settings


@pytest.fixture
def client(sim_app_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(sim_app_settings)) as c:
        yield c
