"""A training's log, read through an API on another machine: every host's part, followed live, whole.

The API, and the two worker hosts of a training across hosts, each have a data dir of their own and share
only PostgreSQL and Redis, as a fleet's machines do.
"""

from __future__ import annotations

import threading

import httpx
import pytest
from gpufleet.client import Client

from support.fleet import make_settings, register, unique
from .test_gang import MLP, final, gang_host

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


def test_the_api_serves_and_follows_the_log_every_host_wrote(tmp_path, request, live_api, workers, scheduler,
                                                              monkeypatch):
    a, b = gang_host(tmp_path, request, "a"), gang_host(tmp_path, request, "b")
    api = make_settings(tmp_path / "api", "postgresql", request, host_name=unique("api"),
                        database_url=a.database_url, redis_url=a.redis_url)
    monkeypatch.setenv("GPUFLEET_UNIX_SOCKET", str(tmp_path / "no.sock"))
    register(a), register(b)
    workers(a), workers(b)
    scheduler(api)
    url = live_api(api)
    client, http = Client(url), httpx.Client(base_url=url, timeout=30)
    r = http.post("/api/v1/trainings", json={"name": "logs", "recipe": "mlp", "config": {**MLP, "max_steps": 40},
                                             "hosts": [a.host_name, b.host_name], "gpus_per_host": 2})
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    followed: list[str] = []
    follower = threading.Thread(target=lambda: followed.extend(client.logs(tid, follow=True, poll_s=0.2)))
    follower.start()
    body = final(http, tid)
    follower.join(180)
    assert not follower.is_alive(), "follow did not end after the training ended"
    assert body["status"] == "succeeded", body
    whole = "".join(client.logs(tid))
    lead_file = (a.logs_dir / "trainings" / f"{tid}.log").read_text()
    other_file = (b.logs_dir / "trainings" / f"{tid}-{b.host_name}.log").read_text()
    # The API machine has no file of this training: everything it served came from the hosts.
    assert not (api.logs_dir / "trainings" / f"{tid}.log").exists()
    lead = "".join(line for line in whole.splitlines(keepends=True) if not line.startswith("[host "))
    other = "".join(line.removeprefix(f"[host {b.host_name}] ")
                    for line in whole.splitlines(keepends=True) if line.startswith(f"[host {b.host_name}] "))
    assert lead == lead_file and other == other_file, whole
    assert "ended: succeeded" in lead and "ended: succeeded" in other and "ranks 2-3 of 4" in other
    assert "".join(followed) == whole
    assert http.get(f"/api/v1/trainings/{tid}/logs", params={"tail": 1}).json()["text"].strip() in (
        lead.splitlines()[-1], f"[host {b.host_name}] {other.splitlines()[-1]}")

