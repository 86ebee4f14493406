"""The system resource: GPUs, hosts, topology, health, and the inventory behind them."""

from __future__ import annotations

from fastapi.testclient import TestClient

from gpufleet.config import load_settings
from gpufleet.devices import simstate
from gpufleet.telemetry.inventory import register_host


def test_gpus_of_a_simulated_fleet(client: TestClient) -> None:
    body = client.get("/api/v1/system/gpus").json()
    assert body["count"] == 4 and body["simulated"] is True
    assert [g["index"] for g in body["data"]] == [0, 1, 2, 3]
    g = body["data"][0]
    assert g["host"] == "sim-host" and g["vendor"] == "nvidia" and g["backend"] == "cuda"
    assert g["memory_total"] == 80 * 2**30 or g["memory_total"] > 79 * 10**9
    assert g["compute_capability"] == "9.0"
    assert g["status"] == "ok"
    # Filtering by host; a host that is not registered is a 404 (tests/api/test_unknown_host.py).
    assert client.get("/api/v1/system/gpus", params={"host": "sim-host"}).json()["count"] == 4
    assert client.get("/api/v1/system/gpus", params={"host": "nowhere"}).status_code == 404


def test_hosts_and_topology(client: TestClient) -> None:
    hosts = client.get("/api/v1/system/hosts").json()
    assert hosts["count"] == 1
    assert hosts["data"][0]["name"] == "sim-host" and hosts["data"][0]["gpu_count"] == 4
    topo = client.get("/api/v1/system/topology").json()["hosts"][0]
    assert topo["gpus"] == [0, 1, 2, 3]
    assert [row[i] for i, row in enumerate(topo["matrix"])] == ["X"] * 4
    assert all(cell.startswith("NV") for r in topo["matrix"] for cell in r if cell != "X")
    assert len(topo["links"]) == 6 and all(l["peer_access"] for l in topo["links"])


def test_health(client: TestClient) -> None:
    body = client.get("/healthz").json()
    assert body["status"] == "ok" and body["database"] == "sqlite" and body["embedded"] is True


def test_operation_ids_are_stable_and_unique(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    ids = [op["operationId"] for path in spec["paths"].values() for op in path.values() if "operationId" in op]
    assert len(ids) == len(set(ids))
    assert {"gpus-list", "hosts-list", "topology-get", "health-get"} <= set(ids)


def test_pairs_topology_is_stored(tmp_path) -> None:
    from gpufleet.db.session import upgrade_database

    s = load_settings(data_dir=tmp_path, simulate="4xH100-80GB", simulate_topology="nvlink-pairs", host_name="p")
    upgrade_database(s)
    register_host(s)
    from fastapi.testclient import TestClient as TC

    from gpufleet.api.app import create_app

    with TC(create_app(s)) as c:
        m = c.get("/api/v1/system/topology").json()["hosts"][0]["matrix"]
    assert m[0][1].startswith("NV") and m[2][3].startswith("NV")
    assert not m[0][2].startswith("NV") and not m[1][3].startswith("NV")


def test_lost_and_missing_gpus_are_marked_not_deleted(sim_app_settings, client: TestClient) -> None:
    simstate.lose_gpu(sim_app_settings, 2)
    register_host(sim_app_settings)
    gpus = {g["index"]: g for g in client.get("/api/v1/system/gpus").json()["data"]}
    assert len(gpus) == 4
    assert gpus[2]["status"] == "unhealthy" and gpus[2]["status_reason"]
    assert gpus[0]["status"] == gpus[1]["status"] == gpus[3]["status"] == "ok"
    # The machine comes back with fewer GPUs: the gone one is missing, not deleted.
    smaller = sim_app_settings.model_copy(update={"simulate": "3xH100-80GB"})
    register_host(smaller)
    gpus = {g["index"]: g for g in client.get("/api/v1/system/gpus").json()["data"]}
    assert len(gpus) == 4 and gpus[3]["status"] == "missing"


def test_admin_drains_and_undrains_over_http(client: TestClient) -> None:
    r = client.post("/api/v1/system/gpus/sim-host/1/drain", json={"reason": "fan swap"})
    assert r.status_code == 200, r.text
    assert r.json()["drained"] is True and r.json()["reason"] == "fan swap (by local)"
    g = {x["index"]: x for x in client.get("/api/v1/system/gpus").json()["data"]}[1]
    assert g["drained"] is True and g["availability"]["state"] == "drained"
    assert "fan swap" in g["availability"]["reason"]
    assert client.post("/api/v1/system/gpus/sim-host/1/undrain").json()["drained"] is False
    g = {x["index"]: x for x in client.get("/api/v1/system/gpus").json()["data"]}[1]
    assert g["drained"] is False and g["drain_reason"] is None


def test_drain_of_unknown_gpu_or_host_is_a_404_that_lists_what_exists(client: TestClient) -> None:
    r = client.post("/api/v1/system/gpus/sim-host/7/drain", json={})
    assert r.status_code == 404 and "it has GPUs 0, 1, 2, 3" in r.json()["detail"]
    r = client.post("/api/v1/system/gpus/elsewhere/0/drain", json={})
    assert r.status_code == 404 and "known hosts: sim-host" in r.json()["detail"]
    assert not any(g["drained"] for g in client.get("/api/v1/system/gpus").json()["data"])
