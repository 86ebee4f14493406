"""Fixtures for the auth tests: a small app behind the real auth layer (``support.people.build_app``).

``on_settings`` and ``people`` come from ``tests/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from gpufleet.config import Settings
from support.people import build_app


@pytest.fixture
def client(on_settings: Settings) -> Iterator[TestClient]:
    with TestClient(build_app(on_settings)) as c:
        yield c
