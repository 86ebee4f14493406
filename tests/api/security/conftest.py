"""Fixtures for the auth tests (see helpers.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from people import SECRET, People, build_app, make_people
from gpufleet.config import Settings


@pytest.fixture
def on_settings(db_settings: Settings) -> Settings:
    """Sign-in required, on both databases."""
    return db_settings.model_copy(update={"auth": "on", "secret_key": SECRET})


@pytest.fixture
def people(on_settings: Settings) -> People:
    return make_people(on_settings, suffix="-" + uuid.uuid4().hex[:6])


@pytest.fixture
def client(on_settings: Settings) -> Iterator[TestClient]:
    with TestClient(build_app(on_settings)) as c:
        yield c
