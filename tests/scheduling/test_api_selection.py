"""The recommend and validate endpoints on a simulated fleet."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.devices import simstate
from gpufleet.scheduling.types import GiB

from scheduling.conftest import sample_into_live


@pytest.fixture
def api(sim_host):
    s = sim_host("nvlink-pairs", "4xH100-80GB")
    with TestClient(create_app(s)) as c:
        yield s, c


def test_recommend_by_memory_returns_a_connected_pair_with_reasons(api) -> None:
    s, c = api
    simstate.add_foreign_process(s, 1, 10 * GiB, user="dave")
    sample_into_live(s)
    r = c.get("/api/v1/system/gpus/recommend", params={"memory_mb": 20_000, "count": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    top = body["candidates"][0]
    assert top["gpu_indexes"] == [2, 3] and top["connection"] == "nvlink"
    assert top["reasons"] and body["wait_reason"] is None


def test_recommend_for_a_training_config_shows_the_estimate(api) -> None:
    _s, c = api
    cfg = {"d_in": 256, "n_latents": 4096, "global_batch_size": 512}
    r = c.get("/api/v1/system/gpus/recommend", params={"recipe": "sae", "config": json.dumps(cfg), "count": 2})
    assert r.status_code == 200, r.text
    est = r.json()["estimate"]
    assert est["world_size"] == 2 and est["micro_batch_size"] == 256 and est["strategy"] == "ddp"
    assert set(est["breakdown"]) >= {"parameters", "gradients", "optimizer_states", "activations",
                                     "ddp_buckets", "framework_overhead"}
    assert est["summary"].startswith("estimated ")
    r2 = c.post("/api/v1/system/gpus/recommend", json={"recipe": "sae", "config": cfg, "count": 2})
    assert r2.status_code == 200 and r2.json()["estimate"]["total"] == est["total"]


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"memory_mb": 100, "count": 5}, "never be placed: needs 5 GPUs on one host"),
        ({"memory_mb": 90_000}, "never be placed: needs 87.9 GiB per GPU"),
        ({"count": 1}, "give memory_mb, or recipe"),
        ({"recipe": "sae", "config": "{bad"}, "config is not valid JSON"),
        ({"recipe": "sae", "config": '{"n_latents": 0}'}, "n_latents"),
        ({"recipe": "nope"}, "unknown recipe 'nope'"),
        ({"memory_mb": -1}, "greater than or equal"),
    ],
)
def test_bad_or_impossible_requests_get_a_4xx_that_says_why(api, params: dict, words: str) -> None:
    _s, c = api
    r = c.get("/api/v1/system/gpus/recommend", params=params)
    assert r.status_code == 422, r.text
    assert words in r.text


def test_validate_lists_every_problem(api) -> None:
    s, c = api
    simstate.add_foreign_process(s, 3, 5 * GiB, user="erin", name="ollama")
    sample_into_live(s)
    r = c.post("/api/v1/system/gpus/validate",
               json={"gpu_ids": [0, 0, 3, 8], "memory_mb": 200_000, "host": s.host_name})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["ok"] is False
    codes = sorted(p["code"] for p in body["problems"])
    assert codes == ["duplicate", "foreign-busy", "short-of-memory", "unknown-gpu"]
    assert any("erin" in p["message"] for p in body["problems"])
    ok = c.post("/api/v1/system/gpus/validate", json={"gpu_ids": [0, 1], "recipe": "mlp", "config": {}})
    assert ok.status_code == 200 and ok.json()["ok"] is True, ok.text
    assert ok.json()["estimate"]["world_size"] == 2


def test_validate_refuses_malformed_bodies(api) -> None:
    _s, c = api
    assert c.post("/api/v1/system/gpus/validate", json={"gpu_ids": []}).status_code == 422
    r = c.post("/api/v1/system/gpus/validate", json={"gpu_ids": [0], "memory_mb": 1, "recipe": "mlp"})
    assert r.status_code == 422 and "not both" in r.text
