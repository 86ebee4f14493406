"""Two GPU hosts, one PostgreSQL and one Redis: each worker runs only its host's trainings."""

from __future__ import annotations

import pytest

from support.fleet import make_settings, register, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

TINY_MLP = {"max_steps": 3, "global_batch_size": 8, "checkpoint_every": 3, "log_every": 1}


def test_two_workers_each_run_only_their_hosts_trainings(tmp_path, request, client_for, workers, scheduler):
    a = make_settings(tmp_path / "a", "postgresql", request, simulate="2xH100-80GB")
    b = make_settings(tmp_path / "b", "postgresql", request, simulate="1xA100-40GB")
    register(a)
    register(b)
    wa, wb = workers(a), workers(b)
    scheduler(a)
    c = client_for(a)
    ids = {}
    for host, gpus in ((a.host_name, [1]), (b.host_name, [0]), (a.host_name, [0]), (b.host_name, None)):
        body = {"name": f"on-{host}", "recipe": "mlp", "config": TINY_MLP, "host": host}
        if gpus is not None:
            body["gpu_ids"] = gpus
        r = c.post("/api/v1/trainings", json=body)
        assert r.status_code == 201, r.text
        ids[r.json()["id"]] = host
    # GPU 1 does not exist on the one-GPU host: refused, not sent somewhere else.
    r = c.post("/api/v1/trainings", json={"name": "x", "recipe": "mlp", "config": TINY_MLP,
                                          "host": b.host_name, "gpu_ids": [1]})
    assert r.status_code == 422 and f"does not exist on host {b.host_name}" in r.json()["detail"]

    def done():
        bodies = [c.get(f"/api/v1/trainings/{tid}").json() for tid in ids]
        return all(x["status"] in ("succeeded", "failed", "cancelled") for x in bodies) and bodies

    bodies = wait_for(done, 180, "all four trainings to end", 0.3)
    for body in bodies:
        host = ids[body["id"]]
        assert body["status"] == "succeeded", body
        assert body["host_name"] == host
        running = next(e for e in c.get(f"/api/v1/trainings/{body['id']}/events").json()["data"]
                       if e["status"] == "running")
        # The worker that ran it is the one of its host (worker ids start with the host name).
        assert running["data"]["host"] == host and running["data"]["worker"].startswith(host + ":")
    # Each worker's log names only its own host's trainings.
    for w, host in ((wa, a.host_name), (wb, b.host_name)):
        out = w.output()
        for tid, h in ids.items():
            assert (tid in out) == (h == host), (host, tid, h)
