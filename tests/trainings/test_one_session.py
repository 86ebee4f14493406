"""``POST /api/v1/trainings`` through the whole app: one database session, one pass down the layers.

The route, the trainings service, the scheduling checks and the estimate all
work in the request's own session; a second session (or a second pooled
connection) per request is what made a burst exhaust the pool. The request goes
route -> trainings service -> scheduling, and the route wakes the scheduler
loop (jobs) once it has committed; nothing lower calls back up.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
from fastapi.testclient import TestClient
from gpufleet.api.app import create_app
from gpufleet.db.session import engine_for, session_scope
from gpufleet.lifecycle.models import Training
from support.fleet import heartbeats_paused, make_settings, register
from sqlalchemy import event, func, select
from sqlalchemy.orm import Session


@dataclass
class Opened:
    sessions: set[int] = field(default_factory=set)
    transactions: int = 0
    checkouts: int = 0
    begins: list[str] = field(default_factory=list)


@contextmanager
def counting(settings) -> Iterator[Opened]:
    """Every Session that begins a transaction, and every connection taken from the engine's pool."""
    seen = Opened()

    def began(session, _transaction, _connection) -> None:
        seen.sessions.add(id(session))
        seen.transactions += 1

    def checkout(*_args) -> None:
        seen.checkouts += 1

    def statement(_conn, _cursor, sql, *_args) -> None:
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
def test_a_create_opens_one_session(tmp_path, request, backend) -> None:
    s = make_settings(tmp_path, backend, request, create_rate_per_minute=60, max_queued_per_user=1000)
    register(s)
    # No lifespan: the scheduler loop and the agent (which have sessions of their own) stay off.
    client = TestClient(create_app(s))
    body = {"name": "one-session", "recipe": "mlp", "config": {"max_steps": 5, "global_batch_size": 16},
            "host": s.host_name}
    client.post("/api/v1/trainings", json=dict(body, name="warm-up"))  # first-use caches (recipes, pool)
    with heartbeats_paused(s), counting(s) as opened:
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


def _crossings(client: TestClient, body: dict) -> list[tuple[str, str, str]]:
    """(caller module, callee module, function) for every call between two gpufleet modules during one POST."""
    seen: list[tuple[str, str, str]] = []

    def profile(frame, event, _arg) -> None:
        if event != "call" or frame.f_back is None:
            return
        callee, caller = frame.f_globals.get("__name__", ""), frame.f_back.f_globals.get("__name__", "")
        if callee != caller and callee.startswith("gpufleet.") and caller.startswith("gpufleet."):
            seen.append((caller, callee, frame.f_code.co_name))

    # The request runs in worker threads its own event loop starts, so they get the profile too.
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        r = client.post("/api/v1/trainings", json=body)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    assert r.status_code == 201, r.text
    return seen


def test_a_create_goes_down_the_layers_once(tmp_path, request) -> None:
    s = make_settings(tmp_path, "sqlite", request, create_rate_per_minute=60, max_queued_per_user=1000)
    register(s)
    client = TestClient(create_app(s))
    body = {"name": "layers", "recipe": "mlp", "config": {"max_steps": 5, "global_batch_size": 16},
            "host": s.host_name}
    client.post("/api/v1/trainings", json=dict(body, name="warm-up"))
    calls = _crossings(client, body)
    route = "gpufleet.api.routes.trainings"
    # The route enters the domain once and the scheduler loop once, after the commit.
    below = [(callee, fn) for caller, callee, fn in calls
             if caller == route and not callee.startswith(("gpufleet.api.", "gpufleet.db.", "gpufleet.config",
                                                           "gpufleet.workkinds"))]
    # The domain's door is the place the request runs in (the team's hosts here), chosen once.
    assert below == [("gpufleet.pools.placement", "create_placed"), ("gpufleet.jobs.scheduler_loop", "wake")], calls
    # The service is entered from that place alone, and nothing lower calls back up.
    into_service = [c for c in calls if c[1] == "gpufleet.trainings.service"
                    and not c[0].startswith(("gpufleet.pools.placement", "gpufleet.trainings."))]
    assert into_service == [], into_service
    assert any(c[:2] == ("gpufleet.pools.placement", "gpufleet.trainings.service") for c in calls), calls
    upward = [c for c in calls if c[0].startswith(("gpufleet.lifecycle.", "gpufleet.scheduling.", "gpufleet.engine."))
              and c[1].startswith(("gpufleet.api.", "gpufleet.jobs.", "gpufleet.trainings."))]
    assert upward == [], upward
    # It did reach scheduling (the fleet checks and the estimate), only through admission,
    # with the config the recipe validated once.
    into_scheduling = {c[0] for c in calls if c[1].startswith("gpufleet.scheduling.")
                       and not c[0].startswith("gpufleet.scheduling.")}
    assert into_scheduling and all(m.startswith("gpufleet.trainings.admission.") for m in into_scheduling), calls
    validated = [c for c in calls if c[1] == "gpufleet.engine.recipes" and c[2] == "resolve_config"]
    assert [c[0] for c in validated] == ["gpufleet.trainings.service"], validated
