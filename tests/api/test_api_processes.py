"""Several API processes on one PostgreSQL and one Redis: one live stream, one rate budget, one scheduler."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from gpufleet.config import load_settings
from gpufleet.telemetry.inventory import heartbeat
from sqlalchemy import create_engine, text
from websockets.sync.client import connect

from support.servers import STRONG_SECRET, gpufleet, make_token, serve_env, serve_process

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

CONFIG = {"max_steps": 10, "global_batch_size": 16}


def _env(pg: str, redis: str, **extra: str) -> dict[str, str]:
    # No estimate warming: three processes warming at once only load the machine.
    return {"GPUFLEET_DATABASE_URL": pg, "GPUFLEET_REDIS_URL": redis, "GPUFLEET_AUTH": "on",
            "GPUFLEET_SECRET_KEY": STRONG_SECRET, "GPUFLEET_EMBEDDED_WORKER": "false",
            "GPUFLEET_ESTIMATE_WARM": "false", **extra}


class GPUHostBeat:
    """The simulated GPU host that serve registered stays online: its heartbeat, as a worker's agent beats."""

    def __init__(self, pg: str, data: Path) -> None:
        self.settings = load_settings(database_url=pg, data_dir=data, host_name="sim-host")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while not self.stop.wait(2.0):
            heartbeat(self.settings, self.settings)

    def __enter__(self) -> GPUHostBeat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


def _wait(pred, timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def _leaders(pg: str) -> int:
    """Scheduler loops holding the advisory lock in this database."""
    engine = create_engine(pg)
    try:
        with engine.connect() as c:
            return c.execute(text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                                  "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")
                             ).scalar_one()
    finally:
        engine.dispose()


def _create(url: str, token: str, name: str) -> httpx.Response:
    return httpx.post(f"{url}/api/v1/trainings", json={"name": name, "recipe": "sae", "config": CONFIG},
                      headers={"Authorization": f"Bearer {token}"}, timeout=120)


def _frames(ws, want, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        assert left > 0, "no matching frame"
        msg = json.loads(ws.recv(timeout=left))
        for m in msg.get("messages", [msg]) if msg.get("type") == "batch" else [msg]:
            if want(m):
                return m


def _status_in(m: dict, status: str) -> bool:
    data = m.get("data") or {}
    return (data.get("training") or {}).get("status") == status


def test_two_api_processes_share_the_stream_the_rate_limits_and_one_scheduler(
        tmp_path: Path, fresh_pg_url: str, redis_url: str) -> None:
    env = _env(fresh_pg_url, redis_url, GPUFLEET_CREATE_RATE_PER_MINUTE="3")
    user = f"ann{uuid.uuid4().hex[:6]}"
    token = make_token(tmp_path / "a", user, "member", **env)
    auth = {"Authorization": f"Bearer {token}"}
    with serve_process(tmp_path / "a", **env) as a, serve_process(tmp_path / "b", **env) as b, \
            GPUHostBeat(fresh_pg_url, tmp_path / "beat"):
        _wait(lambda: _leaders(fresh_pg_url) == 1, what="one scheduler leader")
        made = _create(b.url, token, "through-b")
        assert made.status_code == 201, made.text
        tid = made.json()["id"]
        ticket = httpx.post(f"{a.url}/api/v1/auth/ws-ticket", headers=auth).json()["ticket"]
        with connect(f"ws://127.0.0.1:{a.port}/api/v1/ws?ticket={ticket}") as ws:
            ws.send(json.dumps({"op": "subscribe", "channel": f"training:{tid}"}))
            # Placed by whichever process leads, seen on A, then cancelled through B and seen on A.
            _frames(ws, lambda m: m.get("channel") == f"training:{tid}" and _status_in(m, "scheduled"))
            assert httpx.post(f"{b.url}/api/v1/trainings/{tid}/cancel", headers=auth).status_code == 200
            _frames(ws, lambda m: m.get("channel") == f"training:{tid}" and _status_in(m, "cancelled"))
        # One creation budget for the user, whichever process counts it.
        assert [_create(a.url, token, f"through-a-{i}").status_code for i in range(2)] == [201, 201]
        over = _create(b.url, token, "one-too-many")
        assert over.status_code == 429 and "GPUFLEET_CREATE_RATE_PER_MINUTE" in over.json()["detail"]
        assert _leaders(fresh_pg_url) == 1
        # Whichever led, after A is gone one process leads.
        os.killpg(a.pid, signal.SIGKILL)
        a.proc.wait(30)
        _wait(lambda: _leaders(fresh_pg_url) == 1, what="a leader after A was killed")


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_serve_workers_runs_processes_that_restart_and_share_one_scheduler(
        tmp_path: Path, fresh_pg_url: str, redis_url: str) -> None:
    env = _env(fresh_pg_url, redis_url)
    token = make_token(tmp_path / "d", f"bo{uuid.uuid4().hex[:6]}", "member", **env)
    with serve_process(tmp_path / "d", "--workers", "3", **env) as srv, GPUHostBeat(fresh_pg_url, tmp_path / "beat"):
        _wait(lambda: len(_children(srv.pid)) == 3, what="three API processes")
        _wait(lambda: _leaders(fresh_pg_url) == 1, what="one scheduler leader")
        first = _children(srv.pid)
        made = _create(srv.url, token, "on-three")
        assert made.status_code == 201, made.text
        tid = made.json()["id"]
        auth = {"Authorization": f"Bearer {token}"}
        _wait(lambda: httpx.get(f"{srv.url}/api/v1/trainings/{tid}", headers=auth).json()["status"] == "scheduled",
              what="the training placed")
        os.kill(first[0], signal.SIGKILL)
        _wait(lambda: len(_children(srv.pid)) == 3 and first[0] not in _children(srv.pid),
              what="the killed process replaced")
        _wait(lambda: _leaders(fresh_pg_url) == 1, what="one leader after a process died")
        assert httpx.get(f"{srv.url}/api/v1/trainings/{tid}", headers=auth).status_code == 200
        srv.proc.send_signal(signal.SIGTERM)  # to the parent alone: it stops the others
        assert srv.proc.wait(60) == 0, srv.log_tail()
    _wait(lambda: not any(Path(f"/proc/{p}").exists() for p in first[1:]), what="every process gone")


def test_several_api_processes_need_postgresql_and_redis(tmp_path: Path) -> None:
    out = subprocess.run([*gpufleet(), "serve", "--workers", "2", "--check"], env=serve_env(tmp_path / "d"),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "PostgreSQL (GPUFLEET_DATABASE_URL) and Redis (GPUFLEET_REDIS_URL)" in " ".join(out.stderr.split())
