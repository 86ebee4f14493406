"""The trainings API says where a queued training stands in the queue, in scheduler order."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.scheduling.scheduler import schedule_pending

from scheduling.queue import BOTH, row, start, submit


@BOTH
def test_queued_trainings_carry_their_position_by_priority_then_age(sim_host) -> None:
    s = sim_host("nvlink-pairs", "2xH100-80GB")
    running = submit(s, "fills-the-host", gpus=2)
    schedule_pending(s)
    first = submit(s, "old-low", gpus=2)
    second = submit(s, "new-low", gpus=2)
    urgent = submit(s, "urgent", gpus=2, priority=5, admin=True)
    schedule_pending(s)
    with TestClient(create_app(s.model_copy(update={"auth": "off"}))) as c:
        r = c.get("/api/v1/trainings", params={"limit": 50})
        assert r.status_code == 200, r.text
        rows = r.json()["data"]
        pos = {r["id"]: r["queue_position"] for r in rows}
        assert pos[str(urgent)] == 1
        assert pos[str(first)] == 2
        assert pos[str(second)] == 3
        assert pos[str(running)] is None
        one = c.get(f"/api/v1/trainings/{second}").json()
        assert one["status"] == "queued" and one["queue_position"] == 3
        c.post(f"/api/v1/trainings/{urgent}/cancel")
        assert c.get(f"/api/v1/trainings/{second}").json()["queue_position"] == 2


@BOTH
def test_an_owner_under_their_fair_share_is_placed_ahead_as_the_scheduler_would(sim_host) -> None:
    s = sim_host("nvlink-pairs", "2xH100-80GB")
    submit(s, "alice-holds-the-host", gpus=2, owner="alice")
    schedule_pending(s)
    older = submit(s, "alice-waits", gpus=2, owner="alice")
    newer = submit(s, "bob-waits", gpus=2, owner="bob")
    with TestClient(create_app(s.model_copy(update={"auth": "off"}))) as c:
        rows = c.get("/api/v1/trainings", params={"status": "queued"}).json()["data"]
    # Alice holds the GPUs (recent usage), Bob has used nothing: his newer training goes first.
    assert {r["name"]: r["queue_position"] for r in rows} == {"bob-waits": 1, "alice-waits": 2}
    assert {r["id"] for r in rows} == {str(older), str(newer)}


@pytest.mark.parametrize("sim_host", ["sqlite"], indirect=True)
def test_the_owner_filter_lists_only_that_owners_trainings(sim_host) -> None:
    s = sim_host("nvlink-pairs", "2xH100-80GB")
    submit(s, "alices", owner="alice")
    submit(s, "bobs", owner="bob")
    with TestClient(create_app(s.model_copy(update={"auth": "off"}))) as c:
        rows = c.get("/api/v1/trainings", params={"owner": "bob"}).json()["data"]
    assert [r["name"] for r in rows] == ["bobs"]


@BOTH
def test_the_training_served_next_says_when_the_gpus_it_waits_for_free_up(sim_host) -> None:
    s = sim_host("nvlink-pairs", "2xH100-80GB").model_copy(update={"stop_grace_s": 5.0})
    start(s, "bounded", gpus=2, max_runtime_s=600, preemptible=False)
    head = submit(s, "head", gpus=2)
    behind = submit(s, "behind", gpus=2)
    schedule_pending(s)
    started = row(s, head)
    holder = next(t for t in _all(s) if t.name == "bounded")
    with TestClient(create_app(s.model_copy(update={"auth": "off"}))) as c:
        one = c.get(f"/api/v1/trainings/{head}").json()
        other = c.get(f"/api/v1/trainings/{behind}").json()
    assert started.status == "queued" and one["queue_position"] == 1
    # max_runtime_s from the start of the holder's attempt, plus the grace to checkpoint past it.
    expected = holder.started_at + timedelta(seconds=600 + 5)
    got = datetime.fromisoformat(one["expected_start"].replace("Z", "+00:00"))
    assert abs((got.replace(tzinfo=None) - expected.replace(tzinfo=None)).total_seconds()) < 1, (got, expected)
    # Behind the head nothing can be foretold without replaying the queue: no time is made up.
    assert other["queue_position"] == 2 and other["expected_start"] is None


@pytest.mark.parametrize("sim_host", ["sqlite"], indirect=True)
def test_no_expected_start_when_the_holder_has_no_end_in_sight(sim_host) -> None:
    s = sim_host("nvlink-pairs", "2xH100-80GB")
    start(s, "unbounded", gpus=2, preemptible=False)
    head = submit(s, "head", gpus=2)
    schedule_pending(s)
    with TestClient(create_app(s.model_copy(update={"auth": "off"}))) as c:
        one = c.get(f"/api/v1/trainings/{head}").json()
    assert one["queue_position"] == 1 and one["expected_start"] is None


def _all(s):
    from gpufleet.db.models import Training
    from gpufleet.db.session import session_scope
    from sqlalchemy import select

    with session_scope(s) as sess:
        rows = list(sess.execute(select(Training)).scalars())
        for t in rows:
            sess.expunge(t)
        return rows
