"""Trainings end to end: the API, the scheduler loop, a real Celery worker
process, the real launcher and its DDP ranks (CPU + gloo on simulated GPUs).

The embedded default (SQLite + filesystem broker, the worker started the way
``serve`` starts it) and the fleet (PostgreSQL + Redis) both run.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime

import pytest
from gpufleet.db.models import GPUAllocation
from gpufleet.db.session import session_scope
from gpufleet.devices import simstate
from gpufleet.devices.backend import device_backend
from sqlalchemy import select

from support.fleet import (
    FINAL, TINY_SAE, get_events, get_training, pids_in_group, register, wait_for, wait_status,
)

pytestmark = pytest.mark.slow

def _active_allocations(settings, tid):
    with session_scope(settings) as sess:
        return sess.execute(select(GPUAllocation).where(
            GPUAllocation.training_id == tid, GPUAllocation.released_at.is_(None))).scalars().all()


def test_two_rank_ddp_sae_from_post_to_succeeded(fleet_settings, client_for, workers, scheduler, backend):
    register(fleet_settings)
    if backend == "sqlite":
        # Exactly how `serve` starts its worker: a child process, no Redis.
        from gpufleet.jobs.embedded import start_embedded_worker

        proc = start_embedded_worker(fleet_settings)
    else:
        w = workers(fleet_settings)
        proc, proc_output = w.proc, w.output
    try:
        scheduler(fleet_settings)
        c = client_for(fleet_settings)
        r = c.post("/api/v1/trainings", json={"name": "sae-ddp", "recipe": "sae", "config": TINY_SAE,
                                              "gpu_ids": [0, 1], "host": fleet_settings.host_name})
        if backend == "postgresql":
            # A second one that runs until the test has seen it outlast the
            # broker's visibility timeout (then it is cancelled): long by its
            # own condition, not by how slow this machine is.
            long_cfg = dict(TINY_SAE, max_steps=1_000_000, checkpoint_every=1_000_000)
            long_id = c.post("/api/v1/trainings", json={"name": "long", "recipe": "sae", "config": long_cfg,
                                                        "world_size": 2, "host": fleet_settings.host_name}).json()["id"]
        assert r.status_code == 201, r.text
        tid = r.json()["id"]
        body = wait_status(c, tid, FINAL, 360)
        assert body["status"] == "succeeded", body
        assert body["step"] == TINY_SAE["max_steps"] and body["exit_code"] == 0
        assert body["last_checkpoint"].endswith("step-6")
        assert (fleet_settings.checkpoint_root / tid / "step-6" / "meta.json").exists()
        assert body["host_name"] == fleet_settings.host_name
        assert [g["index"] for g in body["gpus"]] == [0, 1] and all(g["released_at"] for g in body["gpus"])
        assert not _active_allocations(fleet_settings, uuid.UUID(tid))
        # One attempt: a broker redelivery (the visibility timeout on Redis is
        # shorter than this run) must not start it twice.
        assert body["attempt"] == 1
        ev = get_events(c, tid)
        assert [e["seq"] for e in ev] == list(range(1, len(ev) + 1))
        statuses = [e["status"] for e in ev if e["kind"] == "status"]
        assert statuses == ["queued", "scheduled", "running", "succeeded"]
        assert any(e["kind"] == "checkpoint" for e in ev)
        start = next(e for e in ev if e["kind"] == "info")
        assert start["data"]["world_size"] == 2 and start["data"]["simulated"] is True
        m = c.get(f"/api/v1/trainings/{tid}/metrics").json()
        steps = [row["step"] for row in m["data"]]
        assert len(steps) == 6 and steps == sorted(steps) and steps[-1] == 6
        assert all(row["loss"] is not None for row in m["data"])
        # Downsampling keeps the first and the newest point.
        m2 = c.get(f"/api/v1/trainings/{tid}/metrics?max_points=2").json()
        assert m2["total"] == 6 and m2["count"] <= 3 and m2["data"][-1]["step"] == m["data"][-1]["step"]
        logs = c.get(f"/api/v1/trainings/{tid}/logs?tail=50").json()["text"]
        assert "ended: succeeded" in logs
        if backend == "postgresql":
            from gpufleet.jobs.celery_app import make_celery

            visibility = make_celery(fleet_settings).conf.broker_transport_options["visibility_timeout"]
            wait_status(c, long_id, ("running",), 120)
            running_since = time.monotonic()
            # Running, with progress, for twice the visibility timeout: a redelivery had its chance.
            wait_for(lambda: time.monotonic() - running_since > 2 * visibility and get_training(c, long_id)["step"] > 0,
                     4 * visibility + 120, "the long training to outlast the visibility timeout", 0.5)
            long_body = get_training(c, long_id)
            assert long_body["status"] == "running" and long_body["attempt"] == 1
            assert c.post(f"/api/v1/trainings/{long_id}/cancel").status_code == 200
            long_body = wait_status(c, long_id, FINAL, 180)
            assert long_body["status"] == "cancelled" and long_body["attempt"] == 1
            ran = datetime.fromisoformat(long_body["finished_at"]) - datetime.fromisoformat(long_body["started_at"])
            assert ran.total_seconds() > visibility, (ran, visibility)
            running = [e for e in get_events(c, long_id) if e["kind"] == "status" and e["status"] == "running"]
            assert len(running) == 1  # executed exactly once
            assert proc_output().count("Task gpufleet.run_training") == 2 * 2  # received + succeeded, per training
    finally:
        proc.kill()
        proc.wait(10)


def test_cancel_mid_run_stops_every_rank(fleet_settings, client_for, workers, scheduler):
    register(fleet_settings)
    workers(fleet_settings)
    scheduler(fleet_settings)
    c = client_for(fleet_settings)
    cfg = dict(TINY_SAE, max_steps=100000, checkpoint_every=1000)
    tid = c.post("/api/v1/trainings", json={"name": "long", "recipe": "sae", "config": cfg, "gpu_ids": [0, 1],
                                            "host": fleet_settings.host_name}).json()["id"]
    body = wait_for(lambda: (b := get_training(c, tid))["step"] >= 2 and b, 360, "the training to make progress", 0.2)
    pgid = body["launcher_pid"]
    assert len(pids_in_group(pgid)) >= 3  # the launcher and two ranks
    # The worker told its device backend: the simulated GPUs list the launcher as this training's.
    gpus = device_backend(fleet_settings)
    assert [(n and n.training_id) for n in (gpus.process_note(i, pgid) for i in (0, 1))] == [tid, tid]
    r = c.post(f"/api/v1/trainings/{tid}/cancel")
    assert r.status_code == 200 and r.json()["cancel_requested"] is True
    # Every rank goes (SIGTERM, then SIGKILL after the cancel's grace); how fast is a bench's figure, not a test's
    # on a machine other work loads.
    wait_for(lambda: not pids_in_group(pgid), 120, "every rank to be gone")
    # The record follows from the worker. On a machine loaded past its cores (CI's two, load 4-5) the worker
    # can be starved for seconds after the kill; a late write is not a rank left running.
    body = wait_status(c, tid, FINAL, 60)
    assert body["status"] == "cancelled"
    assert not _active_allocations(fleet_settings, uuid.UUID(tid))
    assert [p for p in simstate.read_state(fleet_settings).gpufleet if p.pid == pgid] == []  # and it ended
    # Idempotent: a second cancel answers the same and writes nothing. (The first wrote one "cancel" event, or
    # two where a starved worker's lease ran out first and recovery ended it: "cancelled; the worker ... stopped
    # renewing its lease".)
    cancels = [e["kind"] for e in get_events(c, tid)].count("cancel")
    r = c.post(f"/api/v1/trainings/{tid}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert 1 <= cancels == [e["kind"] for e in get_events(c, tid)].count("cancel")
    # A queued training (one of the host's two GPUs is drained) leaves the queue at once.
    from gpufleet.db.session import write_session
    from gpufleet.scheduling.drain import set_drained

    with write_session(fleet_settings) as sess:
        set_drained(sess, fleet_settings.host_name, [1], True, "kept back by the test")
    w = c.post("/api/v1/trainings", json={"name": "waits", "recipe": "sae", "config": TINY_SAE,
                                          "world_size": 2, "host": fleet_settings.host_name}).json()
    wait_for(lambda: get_training(c, w["id"])["wait_reason"], 60, "a wait reason")
    assert "needs 2 free GPU(s)" in get_training(c, w["id"])["wait_reason"]
    assert c.post(f"/api/v1/trainings/{w['id']}/cancel").json()["status"] == "cancelled"
