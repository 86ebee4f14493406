"""Many small trainings sharing GPUs: strategies, max models per GPU, memory, nothing dropped."""

from __future__ import annotations

import uuid

import pytest
from gpufleet.db.models import GPUAllocation, Training
from gpufleet.db.session import session_scope
from gpufleet.scheduling.batch import Item, Slot, pick, plan
from gpufleet.scheduling.scheduler import schedule_pending
from sqlalchemy import func, select

from support.fleet import make_settings, register

GB = 2**30


def test_round_robin_spreads_in_order_and_keeps_the_rest_waiting():
    slots = [Slot(i, 80 * GB) for i in range(3)]
    items = [Item(k, "mlp") for k in range(14)]
    got, waiting = plan(items, slots, "round_robin", max_models=4)
    assert got == {0: [0, 3, 6, 9], 1: [1, 4, 7, 10], 2: [2, 5, 8, 11]}
    # The seed truncated these silently; here they wait.
    assert waiting == [12, 13]


def test_load_balance_fills_the_least_loaded_and_respects_memory():
    slots = [Slot(0, 10 * GB, models=2, reserved=8 * GB), Slot(1, 10 * GB), Slot(2, 10 * GB, models=1, reserved=1 * GB)]
    items = [Item(k, "sae", memory=3 * GB) for k in range(7)]
    got, waiting = plan(items, slots, "load_balance", max_models=4)
    # GPU 0 has 2 GiB left: no 3 GiB model fits there.
    assert got[0] == []
    assert len(got[1]) == 3 and len(got[2]) == 3  # 9 GiB of 10 on each
    assert waiting == [6]


def test_affinity_keeps_a_recipe_together():
    slots = [Slot(0, None), Slot(1, None)]
    items = [Item("s1", "sae"), Item("m1", "mlp"), Item("s2", "sae"), Item("m2", "mlp"), Item("s3", "sae")]
    got, waiting = plan(items, slots, "affinity", max_models=3)
    assert not waiting
    assert sorted(got[0]) == ["s1", "s2", "s3"] and sorted(got[1]) == ["m1", "m2"]


def test_unknown_strategy_and_bad_limits_are_refused():
    with pytest.raises(ValueError, match="unknown strategy 'spread'"):
        pick([Slot(0)], "mlp", None, "spread", 4)
    with pytest.raises(ValueError, match="max_models"):
        plan([], [Slot(0)], "round_robin", 0)


def test_batch_of_120_shares_gpus_and_nothing_is_dropped(tmp_path, backend, request, client_for):
    settings = make_settings(tmp_path, backend, request, simulate="8xH100-80GB",
                             gpu={"max_models_per_gpu": 4})
    register(settings)
    c = client_for(settings)
    items = [{"name": f"m{i}", "recipe": "mlp" if i % 3 else "sae",
              "config": {"max_steps": 2}, "memory_mb": 1024} for i in range(120)]
    r = c.post("/api/v1/trainings/batch", json={"items": items, "strategy": "affinity", "host": settings.host_name})
    assert r.status_code == 201, r.text
    batch = r.json()
    assert batch["count"] == 120 and all(t["exclusive"] is False for t in batch["data"])
    ids = [t["id"] for t in batch["data"]]
    # An exclusive training that wants GPU 3 alone.
    ex = c.post("/api/v1/trainings", json={"name": "alone", "recipe": "mlp", "config": {"max_steps": 2},
                                           "gpu_ids": [3], "host": settings.host_name, "priority": 5}).json()
    schedule_pending(settings)
    with session_scope(settings) as sess:
        per_gpu = dict(sess.execute(
            select(GPUAllocation.gpu_index, func.count()).where(
                GPUAllocation.host_id == sess.scalar(
                    select(Training.host_id).where(Training.id == uuid.UUID(ex["id"]))),
                GPUAllocation.released_at.is_(None), GPUAllocation.exclusive.is_(False))
            .group_by(GPUAllocation.gpu_index)).all())
        statuses = sess.execute(select(Training.status, func.count()).where(
            Training.id.in_([uuid.UUID(i) for i in ids])).group_by(Training.status)).all()
    # The higher-priority exclusive training got GPU 3 to itself; 7 GPUs x 4 models share the rest.
    assert c.get(f"/api/v1/trainings/{ex['id']}").json()["status"] == "scheduled"
    assert 3 not in per_gpu and set(per_gpu.values()) == {4} and len(per_gpu) == 7
    assert dict(statuses) == {"scheduled": 28, "queued": 92}
    waiting = c.get("/api/v1/trainings", params={"status": "queued", "limit": 500}).json()
    mine = [t for t in waiting["data"] if t["id"] in ids]
    assert len(mine) == 92 and all("full" in (t["wait_reason"] or "") for t in mine[:5])
    # Affinity: one recipe per GPU where it can.
    by_gpu = {}
    for t in (c.get(f"/api/v1/trainings/{i}").json() for i in ids):
        if t["status"] == "scheduled":
            by_gpu.setdefault(t["gpu_ids"][0], set()).add(t["recipe"])
    assert sum(len(v) == 1 for v in by_gpu.values()) >= 6


def test_server_choice_uses_the_selection_logic_and_says_why(tmp_path, client_for):
    settings = make_settings(tmp_path, "sqlite", simulate="4xH100-80GB", simulate_topology="nvlink-pairs")
    register(settings)
    c = client_for(settings)
    ok = c.post("/api/v1/trainings", json={"name": "auto2", "recipe": "mlp", "config": {"max_steps": 2},
                                           "world_size": 2}).json()
    # More memory than the largest GPU can never run: refused now, not queued forever (the never-fit rule).
    huge = c.post("/api/v1/trainings", json={"name": "huge", "recipe": "mlp", "config": {"max_steps": 2},
                                             "world_size": 2, "memory_mb": 90 * 1024})
    assert huge.status_code == 422 and "80.0 GiB" in huge.json()["detail"], huge.text
    res = schedule_pending(settings)
    body = c.get(f"/api/v1/trainings/{ok['id']}").json()
    assert body["status"] == "scheduled" and body["selection"]["by"] == "recommend"
    assert body["gpu_ids"] == body["selection"]["chosen"] and "NVLink" in body["selection"]["reason"]
    assert uuid.UUID(ok["id"]) not in res.waiting


def test_queue_order_is_priority_then_age(fleet_settings, client_for):
    from gpufleet.jobs.supervisor import _claim, _finish
    from gpufleet.lifecycle import outcome

    host_id = register(fleet_settings)
    c = client_for(fleet_settings)

    def make(name, prio):
        return c.post("/api/v1/trainings", json={"name": name, "recipe": "mlp", "config": {"max_steps": 2},
                                                 "gpu_ids": [0], "host": fleet_settings.host_name,
                                                 "priority": prio}).json()["id"]

    order = [make("old-low", 0), make("high", 5), make("new-low", 0), make("mid", 2)]
    started = []
    for _ in order:
        res = schedule_pending(fleet_settings)
        mine = [tid for tid, _ in res.scheduled if str(tid) in order]
        assert len(mine) == 1  # one GPU: one at a time, the rest wait with a reason
        started.append(str(mine[0]))
        waiting = [c.get(f"/api/v1/trainings/{t}").json() for t in order if t not in started]
        assert all(w["status"] == "queued" and "GPU 0 is held by training" in w["wait_reason"] for w in waiting)
        t = _claim(fleet_settings, fleet_settings, mine[0], host_id, fleet_settings.host_name, "w:1:a")
        _finish(fleet_settings, t, "w:1:a", outcome.Decision("succeeded", "finished"), 0)
    assert [c.get(f"/api/v1/trainings/{t}").json()["name"] for t in started] == ["high", "mid", "old-low", "new-low"]


def test_a_placeable_training_behind_a_long_waiting_queue_is_placed_in_one_pass(fleet_settings, client_for):
    register(fleet_settings)
    c = client_for(fleet_settings)

    def make(name, gpu, prio=0):
        r = c.post("/api/v1/trainings", json={"name": name, "recipe": "mlp", "config": {"max_steps": 2},
                                              "gpu_ids": [gpu], "host": fleet_settings.host_name, "priority": prio})
        assert r.status_code == 201, r.text
        return r.json()["id"]

    # Five ahead in the queue want GPU 0 (one gets it, four wait); the last wants the free GPU 1.
    head = [make(f"wants-0-{i}", 0, prio=9) for i in range(5)]
    last = make("wants-1", 1)
    # Pages of two: the pass must read past the head of the queue to reach it.
    res = schedule_pending(fleet_settings, limit=2)
    placed = {str(tid) for tid, _ in res.scheduled}
    assert last in placed, (res.scheduled, res.waiting)
    assert len(placed & set(head)) == 1
