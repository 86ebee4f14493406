"""A fleet of rows for bookings: hosts and GPUs in a migrated database of the test's own (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest

from gpufleet.config import Settings
from gpufleet.db.models import GPU, Host
from gpufleet.db.session import session_scope

NOW = datetime(2026, 12, 7, 9, 0, tzinfo=timezone.utc)  # a Monday


def at(hours: float) -> datetime:
    return NOW + timedelta(hours=hours)


@pytest.fixture
def add_host(db_settings: Settings) -> Callable[..., Host]:
    def make(name: str, n: int = 4, model: str = "NVIDIA H100 80GB HBM3") -> Host:
        with session_scope(db_settings) as sess:
            h = Host(name=name, status="online")
            sess.add(h)
            sess.flush()
            sess.add_all(GPU(host_id=h.id, index=i, vendor="nvidia", backend="cuda", name=model) for i in range(n))
            return h

    return make
