"""One database session per request: ``POST /api/v1/trainings`` through the whole app.

The route, the trainings service, the scheduling checks and the estimate all
work in the request's own session; a second session (or a second pooled
connection) per request is what made a burst exhaust the pool.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, func, select
from sqlalchemy.orm import Session

from gpufleet.api.app import create_app
from gpufleet.db.session import engine_for, session_scope
from gpufleet.trainings.models import Training
from jobs.conftest import make_settings, register


@dataclass
class Opened:
    sessions: set[int] = field(default_factory=set)
    transactions: int = 0
    checkouts: int = 0
    begins: list[str] = field(default_factory=list)


@contextmanager
def counting(settings) -> Iterator[Opened]:  # noqa: ANN001
    """Every Session that begins a transaction, and every connection taken from the engine's pool."""
    seen = Opened()

    def began(session, _transaction, _connection) -> None:  # noqa: ANN001
        seen.sessions.add(id(session))
        seen.transactions += 1

    def checkout(*_args) -> None:  # noqa: ANN002
        seen.checkouts += 1

    def statement(_conn, _cursor, sql, *_args) -> None:  # noqa: ANN001, ANN002
        if sql.startswith("BEGIN"):
            seen.begins.append(sql)

    engine = engine_for(settings)
    event.listen(Session, "after_begin", began)
    event.listen(engine, "checkout", checkout)
    event.listen(engine, "before_cursor_execute", statement)
    try:
        yield seen
    finally:
        event.remove(Session, "after_begin", began)
        event.remove(engine, "checkout", checkout)
        event.remove(engine, "before_cursor_execute", statement)


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_a_create_opens_one_session(tmp_path, request, backend) -> None:  # noqa: ANN001
    s = make_settings(tmp_path, backend, request, create_rate_per_minute=60, max_queued_per_user=1000)
    register(s)
    # No lifespan: the scheduler loop and the agent (which have sessions of their own) stay off.
    client = TestClient(create_app(s))
    body = {"name": "one-session", "recipe": "mlp", "config": {"max_steps": 5, "global_batch_size": 16},
            "host": s.host_name}
    client.post("/api/v1/trainings", json=dict(body, name="warm-up"))  # first-use caches (recipes, pool)
    with counting(s) as opened:
        r = client.post("/api/v1/trainings", json=body)
    assert r.status_code == 201, r.text
    assert len(opened.sessions) == 1, opened
    if backend == "postgresql":
        # One connection, one transaction: the admission checks, the checks against
        # the fleet, the estimate and the write all go through it.
        assert opened.checkouts == 1 and opened.transactions == 1, opened
    else:
        # SQLite's write takes the lock with BEGIN IMMEDIATE, so the same session
        # gives its read connection back and begins again; still one session.
        assert opened.transactions <= 2 and opened.begins[-1] == "BEGIN IMMEDIATE", opened
    with session_scope(s) as sess:
        assert sess.scalar(select(func.count()).select_from(Training).where(Training.name == "one-session")) == 1
