"""One rule for a host that is not registered: 404 naming the known hosts, on every route that takes one."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from gpufleet.config import Settings
from gpufleet.db.models import GPU, Training
from gpufleet.db.session import session_scope

REQUESTS = [
    ("get", "/api/v1/system/gpus", {"params": {"host": "nope"}}),
    ("get", "/api/v1/system/topology", {"params": {"host": "nope"}}),
    ("get", "/api/v1/system/metrics/history", {"params": {"host": "nope"}}),
    ("get", "/api/v1/system/gpus/recommend", {"params": {"host": "nope", "memory_mb": 100}}),
    ("post", "/api/v1/system/gpus/recommend", {"json": {"recipe": "mlp", "host": "nope"}}),
    ("post", "/api/v1/system/gpus/validate", {"json": {"gpu_ids": [0], "host": "nope", "memory_mb": 1}}),
    ("post", "/api/v1/trainings", {"json": {"name": "t", "recipe": "mlp", "host": "nope"}}),
    ("post", "/api/v1/trainings/batch", {"json": {"items": [{"name": "t", "recipe": "mlp"}], "host": "nope"}}),
    ("post", "/api/v1/system/gpus/nope/0/drain", {"json": {"reason": "x"}}),
    ("post", "/api/v1/system/gpus/nope/0/undrain", {}),
]


def _written(s: Settings) -> tuple[int, int]:
    with session_scope(s) as sess:
        return (sess.scalar(select(func.count()).select_from(Training)) or 0,
                sess.scalar(select(func.count()).select_from(GPU).where(GPU.drained.is_(True))) or 0)


@pytest.mark.parametrize(("method", "path", "kw"), REQUESTS, ids=[f"{m} {p}" for m, p, _ in REQUESTS])
def test_an_unknown_host_is_a_404_naming_the_known_hosts(client: TestClient, sim_app_settings: Settings,
                                                        method: str, path: str, kw: dict) -> None:
    before = _written(sim_app_settings)
    r = client.request(method, path, **kw)
    assert r.status_code == 404, r.text
    assert r.json() == {"detail": "host 'nope' is not known; known hosts: sim-host"}
    assert _written(sim_app_settings) == before
    # The schema says so too, for generated clients.
    assert "404" in client.app.openapi()["paths"][path.replace("nope/0", "{host}/{index}")][method]["responses"]


def test_a_known_host_still_filters(client: TestClient) -> None:
    r = client.get("/api/v1/system/gpus", params={"host": "sim-host"})
    assert r.status_code == 200 and r.json()["count"] == 4
    assert [h["host"] for h in client.get("/api/v1/system/topology", params={"host": "sim-host"}).json()["hosts"]] \
        == ["sim-host"]
