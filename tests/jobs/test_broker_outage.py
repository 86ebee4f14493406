"""A training created while the broker (Redis) is down is sent within seconds of its return.

A Redis server of its own (so stopping it touches no other test), PostgreSQL,
the API and the scheduler loop.
"""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from support.servers import free_port

from support.fleet import TINY_SAE, make_settings, register, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


class RedisServer:
    def __init__(self, tmp_path, port: int):
        self.port = port
        self.dir = tmp_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--port", str(self.port),
                                      "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                      "--dir", str(self.dir)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: self.client().ping(), 30, "redis to start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)

    def client(self):
        import redis

        return redis.Redis(port=self.port, socket_connect_timeout=1)

    def ready(self) -> bool:
        try:
            return bool(self.client().ping())
        except Exception:  # noqa: BLE001
            return False


def test_training_created_during_a_broker_outage_is_sent_within_5s_of_its_return(
        tmp_path, request, client_for, scheduler, caplog):
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (.ci/run installs it)")
    port = free_port()
    server = RedisServer(tmp_path, port)
    server.start()
    # The default lease: the periodic re-send would come only after 2 minutes.
    s = make_settings(tmp_path, "postgresql", request, lease_s=30.0)
    s = s.model_copy(update={"redis_url": f"redis://127.0.0.1:{port}/0"})
    try:
        register(s)
        scheduler(s)
        c = client_for(s)
        server.stop()
        tid = c.post("/api/v1/trainings", json={"name": "during-outage", "recipe": "sae", "config": TINY_SAE,
                                                "gpu_ids": [0], "host": s.host_name}).json()["id"]
        wait_for(lambda: c.get(f"/api/v1/trainings/{tid}").json()["status"] == "scheduled", 60,
                 "the training to be scheduled")
        wait_for(lambda: any(f"could not send training {tid}" in r.getMessage() for r in caplog.records), 60,
                 "its send to fail")
        server.start()
        back = time.monotonic()
        queue = f"host.{s.host_name}"
        wait_for(lambda: server.client().llen(queue) > 0, 15, "the task in the host's queue", 0.1)
        assert time.monotonic() - back < 5
        assert server.client().llen(queue) == 1
    finally:
        server.stop()
