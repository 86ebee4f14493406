"""Fixtures for sessions: tests/conftest.py's sign-in set (``on_settings``, ``people``,
``app_client``) with a session time limit; real workers come from ``support.fleet``."""

from __future__ import annotations

import pytest

from gpufleet.config import Settings


@pytest.fixture
def on_settings(on_settings: Settings) -> Settings:
    return on_settings.model_copy(update={"session_max_hours": 8.0})
