"""POST /api/v1/trainings: what is accepted, what is refused, and that a refusal writes nothing."""

from __future__ import annotations

import pytest
from gpufleet.db.models import Training, TrainingEvent
from gpufleet.db.session import session_scope
from sqlalchemy import func, select

from support.fleet import TINY_SAE, register


def _counts(settings):
    with session_scope(settings) as sess:
        return (sess.scalar(select(func.count()).select_from(Training)),
                sess.scalar(select(func.count()).select_from(TrainingEvent)))


def test_create_fills_seed_columns_and_queues(fleet_settings, client_for):
    register(fleet_settings)
    c = client_for(fleet_settings)
    r = c.post("/api/v1/trainings", json={"name": "two-rank", "recipe": "sae", "config": TINY_SAE,
                                                 "gpu_ids": [0, 1], "host": fleet_settings.host_name})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["gpu_ids"] == [0, 1] and body["distributed"] is True and body["world_size"] == 2
    assert body["status"] == "queued" and body["auto_select"] is False
    # The config is the recipe's resolved config, defaults filled in.
    assert body["config"]["max_steps"] == 6 and "lr" in body["config"]
    ev = c.get(f"/api/v1/trainings/{body['id']}/events").json()["data"]
    assert [(e["seq"], e["status"]) for e in ev] == [(1, "queued")]

    r = c.post("/api/v1/trainings", json={"name": "auto", "recipe": "sae", "config": TINY_SAE})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["gpu_ids"] is None and body["auto_select"] is True
    assert body["world_size"] == 1 and body["distributed"] is False


def test_create_keeps_preemptible_and_max_runtime(fleet_settings, client_for):
    register(fleet_settings)
    c = client_for(fleet_settings)
    r = c.post("/api/v1/trainings", json={"name": "bounded", "recipe": "sae", "config": TINY_SAE,
                                          "preemptible": True, "max_runtime_s": 600, "priority": 3})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["preemptible"] is True and body["max_runtime_s"] == 600 and body["preempted_by"] is None
    # Sign-in is off, so the request is the local admin's: not preemptible unless it says so.
    r = c.post("/api/v1/trainings", json={"name": "default", "recipe": "sae", "config": TINY_SAE})
    assert r.json()["preemptible"] is False and r.json()["max_runtime_s"] is None


@pytest.mark.parametrize(
    "patch, status, words",
    [
        ({"recipe": "nope"}, 422, ["unknown recipe 'nope'", "sae"]),
        ({"gpu_ids": [0, 7]}, 422, ["GPU 7 does not exist on host", "0–1"]),
        ({"gpu_ids": [1, 1]}, 422, ["GPU 1 is listed twice"]),
        ({"gpu_ids": [0, 1], "world_size": 3}, 422, ["world_size 3 does not match the 2 GPU"]),
        ({"gpu_ids": [0, 1], "distributed": False}, 422, ["need distributed=true"]),
        ({"config": dict(TINY_SAE, data_path="../../etc/passwd.npy")}, 422, ["outside the data root"]),
        ({"config": dict(TINY_SAE, bogus=1)}, 422, ["bogus", "unknown field"]),
        ({"host": "no-such-host"}, 404, ["host 'no-such-host' is not known; known hosts:"]),
        ({"distributed": True}, 422, ["needs world_size"]),
        ({"gpu_ids": []}, 422, ["gpu_ids is empty"]),
        ({"preemptible": "sometimes"}, 422, ["preemptible", "valid boolean"]),
        ({"max_runtime_s": 0}, 422, ["max_runtime_s", "greater than or equal to 1"]),
        ({"max_runtime_s": 10**9}, 422, ["max_runtime_s", "less than or equal to"]),
    ],
)
def test_bad_requests_say_what_to_fix_and_write_nothing(fleet_settings, client_for, patch, status, words):
    register(fleet_settings)
    c = client_for(fleet_settings)
    before = _counts(fleet_settings)
    body = {"name": "bad", "recipe": "sae", "config": TINY_SAE, "host": fleet_settings.host_name}
    body.update(patch)
    r = c.post("/api/v1/trainings", json=body)
    assert r.status_code == status, r.text
    for w in words:
        assert w in _detail(r), r.json()
    assert _counts(fleet_settings) == before


def _detail(r) -> str:
    """The 422's words: a string, or FastAPI-shaped items (one per wrong field) joined."""
    detail = r.json()["detail"]
    if isinstance(detail, list):
        return "; ".join(".".join(map(str, d["loc"])) + ": " + d["msg"] for d in detail)
    return detail


def test_every_config_problem_comes_in_one_422(fleet_settings, client_for):
    register(fleet_settings)
    c = client_for(fleet_settings)
    before = _counts(fleet_settings)
    r = c.post("/api/v1/trainings", json={"name": "bad", "recipe": "sae",
                                          "config": {"d_in": "abc", "lr": -1, "max_stepz": 3}})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert sorted(tuple(d["loc"]) for d in detail) == [
        ("body", "config", "d_in"), ("body", "config", "lr"), ("body", "config", "max_stepz")]
    assert all(d["msg"] for d in detail)
    assert _counts(fleet_settings) == before


def test_a_world_size_no_host_has_is_refused_naming_the_fleet(fleet_settings, client_for):
    register(fleet_settings)  # one host with 2 simulated GPUs
    c = client_for(fleet_settings)
    before = _counts(fleet_settings)
    # More GPUs than any host has (the PostgreSQL database also holds other tests' hosts).
    big = dict(TINY_SAE, global_batch_size=1024)
    r = c.post("/api/v1/trainings", json={"name": "big", "recipe": "sae", "config": big, "world_size": 1024})
    assert r.status_code == 422, r.text
    assert "world_size 1024" in r.json()["detail"] and f"{fleet_settings.host_name} has 2" in r.json()["detail"]
    r = c.post("/api/v1/trainings", json={"name": "big", "recipe": "sae", "config": TINY_SAE, "world_size": 4,
                                          "host": fleet_settings.host_name})
    assert r.status_code == 422 and "which has 2" in r.json()["detail"], r.text
    assert _counts(fleet_settings) == before
    r = c.post("/api/v1/trainings", json={"name": "fits", "recipe": "sae", "config": TINY_SAE, "world_size": 2})
    assert r.status_code == 201, r.text


def test_batch_is_all_or_nothing(fleet_settings, client_for):
    register(fleet_settings)
    c = client_for(fleet_settings)
    before = _counts(fleet_settings)
    items = [{"name": f"m{i}", "recipe": "mlp", "config": {"max_steps": 2}} for i in range(5)]
    items[3]["config"] = {"max_steps": 0}
    r = c.post("/api/v1/trainings/batch", json={"items": items, "strategy": "round_robin"})
    assert r.status_code == 422 and "item 3" in _detail(r) and "items.3.config.max_steps" in _detail(r)
    assert _counts(fleet_settings) == before
    r = c.post("/api/v1/trainings/batch", json={"items": items[:3], "strategy": "spread"})
    assert r.status_code == 422
    assert _counts(fleet_settings) == before


def test_create_stores_the_memory_estimate(fleet_settings, client_for):
    register(fleet_settings)
    c = client_for(fleet_settings)
    body = c.post("/api/v1/trainings", json={"name": "est", "recipe": "sae", "config": TINY_SAE,
                                             "world_size": 2}).json()
    assert body["memory_estimate"] > 0 and body["estimate"]["world_size"] == 2
    assert body["estimate"]["total"] == body["memory_estimate"]
    # A figure the person gives is what gets reserved; the estimate stays beside it.
    body = c.post("/api/v1/trainings", json={"name": "given", "recipe": "sae", "config": TINY_SAE,
                                             "memory_mb": 2048}).json()
    assert body["memory_estimate"] == 2048 * 2**20 and body["estimate"]["total"] != body["memory_estimate"]
