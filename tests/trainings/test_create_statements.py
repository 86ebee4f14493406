"""How many SQL statements one ``POST /api/v1/trainings`` costs, sign-in on, on PostgreSQL.

Under a burst a create waits mostly on database round trips (py-spy: psycopg's
``Connection.wait``), so the count of statements per create is what bounds the
creates per second. The count is held here so that a change that adds a round
trip to every create is seen.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from gpufleet.api.app import create_app
from gpufleet.db.session import engine_for
from support.fleet import heartbeats_paused, make_settings, register
from support.people import SECRET, bearer, make_people

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def _statements(settings, client: TestClient, body: dict, token: str) -> tuple[int, list[str]]:
    seen: list[str] = []

    def statement(_conn, _cursor, sql, *_args) -> None:
        seen.append(" ".join(sql.split())[:160])

    engine = engine_for(settings)
    event.listen(engine, "before_cursor_execute", statement)
    try:
        r = client.post("/api/v1/trainings", json=body, headers=bearer(token))
    finally:
        event.remove(engine, "before_cursor_execute", statement)
    return r.status_code, seen


def test_statements_per_create(tmp_path, request) -> None:
    s = make_settings(tmp_path, "postgresql", request, auth="on", secret_key=SECRET)
    register(s)
    people = make_people(s)
    client = TestClient(create_app(s))
    body = {"name": "count", "recipe": "mlp", "config": {"max_steps": 5, "global_batch_size": 16}}
    for i in range(2):  # first-use caches (recipes, pool, the token's last-used time)
        code, _ = _statements(s, client, dict(body, name=f"warm-{i}"), people.alice)
        assert code == 201
    with heartbeats_paused(s):  # the harness's own beat (every 5 s) is no statement of the create
        code, seen = _statements(s, client, body, people.alice)
    assert code == 201, seen
    print(f"\n{len(seen)} statements:\n" + "\n".join(seen))
    # The token, the queued cap, the hosts, the calibrated estimate, the GPUs' memory, the row, its
    # queued event (seq 1, no counter round trip), and no read-back of a row that has no GPUs yet.
    assert len(seen) <= 7, seen
