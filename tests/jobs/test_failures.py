"""When things go wrong: a killed worker, a failing rank, out of memory.

Faults are injected with the training engine's GPUFLEET_TRAIN_FAULT drill
(RANK:STEP[:KIND]) in the worker's environment, which its launchers inherit.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
from gpufleet.db.models import Training, TrainingMetric
from gpufleet.db.session import session_scope
from gpufleet.jobs.scheduler_loop import tick
from sqlalchemy import select

from support.fleet import (
    FINAL, TINY_SAE, get_events, get_training, make_settings, pids_in_group, register, wait_for, wait_status,
)

pytestmark = pytest.mark.slow

def _losses(settings, tid):
    with session_scope(settings) as sess:
        rows = sess.execute(select(TrainingMetric.step, TrainingMetric.loss)
                            .where(TrainingMetric.training_id == uuid.UUID(tid))
                            .order_by(TrainingMetric.step)).all()
    return dict(rows)


def test_rank_failure_fails_fast_with_rank_and_error(tmp_path, client_for, workers, scheduler):
    settings = make_settings(tmp_path, "sqlite")
    register(settings)
    workers(settings, env={"GPUFLEET_TRAIN_FAULT": "1:3"})
    scheduler(settings)
    c = client_for(settings)
    cfg = dict(TINY_SAE, max_steps=50)
    tid = c.post("/api/v1/trainings", json={"name": "breaks", "recipe": "sae", "config": cfg,
                                            "gpu_ids": [0, 1], "max_restarts": 0}).json()["id"]
    body = wait_status(c, tid, FINAL, 120)
    assert body["status"] == "failed", body
    assert "rank 1" in body["status_reason"] and "injected failure" in body["status_reason"]
    assert body["exit_code"] == 12 and body["restarts"] == 0
    # Within 15 s of the rank's failure (the step it died at was the last one reported).
    with session_scope(settings) as sess:
        last_step_time = max(sess.execute(select(TrainingMetric.time).where(
            TrainingMetric.training_id == uuid.UUID(tid))).scalars())
        t = sess.get(Training, uuid.UUID(tid))
    assert (t.finished_at - last_step_time).total_seconds() < 15
    assert not pids_in_group(body["launcher_pid"])


def test_oom_is_not_retried_without_rebalance(tmp_path, client_for, workers, scheduler):
    settings = make_settings(tmp_path, "sqlite")
    register(settings)
    workers(settings, env={"GPUFLEET_TRAIN_FAULT": "0:3:oom"})
    scheduler(settings)
    c = client_for(settings)
    tid = c.post("/api/v1/trainings", json={"name": "oom", "recipe": "sae", "config": TINY_SAE,
                                            "gpu_ids": [0], "max_restarts": 3}).json()["id"]
    body = wait_status(c, tid, FINAL, 120)
    assert body["status"] == "failed" and body["exit_code"] == 10
    assert "out of memory" in body["status_reason"] and "does not allow rebalancing" in body["status_reason"]
    assert body["attempt"] == 1 and body["restarts"] == 0
    assert not [e for e in get_events(c, tid) if e["kind"] == "retry"]


def _reference_losses(settings, cfg, tmp_path):
    """The same config run by the launcher directly, with no fault."""
    spec = {"recipe": "sae", "config": cfg, "devices": ["cuda:0"], "ranks_on_cpu": True,
            "checkpoint_dir": str(tmp_path / "ref-ckpt"), "progress_file": str(tmp_path / "ref.jsonl"),
            "data_root": str(settings.data_root), "resume": False}
    (tmp_path / "ref.json").write_text(json.dumps(spec))
    subprocess.run([sys.executable, "-m", "gpufleet.engine.launch", str(tmp_path / "ref.json")],
                   check=True, capture_output=True, timeout=120)
    lines = [json.loads(x) for x in (tmp_path / "ref.jsonl").read_text().splitlines() if x.strip()]
    return {x["step"]: x["loss"] for x in lines if x["type"] == "step"}


def test_oom_rebalance_resumes_with_half_micro_batch_and_same_curve(tmp_path, client_for, workers):
    settings = make_settings(tmp_path, "sqlite")
    register(settings)
    cfg = dict(TINY_SAE, max_steps=8, checkpoint_every=2)
    c = client_for(settings)
    tid = c.post("/api/v1/trainings", json={"name": "rebalance", "recipe": "sae", "config": cfg,
                                            "gpu_ids": [0], "allow_rebalance": True}).json()["id"]
    # The first worker runs with the fault; the scheduler is driven by hand so
    # that the retry goes to a worker without it.
    w1 = workers(settings, env={"GPUFLEET_TRAIN_FAULT": "0:5:oom"})
    wait_for(lambda: tick(settings).scheduled, 10, "the training to be scheduled")
    wait_for(lambda: any(e["kind"] == "retry" for e in get_events(c, tid)), 120, "the out-of-memory retry", 0.2)
    w1.stop()
    body = get_training(c, tid)
    assert body["status"] == "queued" and body["restarts"] == 0
    assert body["config"]["micro_batch_size"] == 8 and body["config"]["grad_accum_steps"] == 2
    retry = next(e for e in get_events(c, tid) if e["kind"] == "retry")
    assert retry["data"]["retry_kind"] == "oom_rebalance" and "same global batch" in retry["reason"]
    workers(settings)
    wait_for(lambda: tick(settings).scheduled, 10, "the retry to be scheduled")
    body = wait_status(c, tid, FINAL, 120)
    assert body["status"] == "succeeded" and body["attempt"] == 2
    got = _losses(settings, tid)
    ref = _reference_losses(settings, cfg, tmp_path)
    assert sorted(got) == sorted(ref) == list(range(1, 9))
    for step in ref:
        assert got[step] == pytest.approx(ref[step], rel=1e-4, abs=1e-6), (step, got, ref)


def test_hung_collective_fails_the_job_with_the_rank_and_reason(tmp_path, client_for, workers, scheduler):
    """A rank that stops answering (SIGSTOP) hangs the other one in a collective;
    past the configured timeout the job fails instead of holding its GPUs."""
    import os
    import signal

    from gpufleet.jobs.kinds import run_dir
    from gpufleet.jobs.procs import group_members

    settings = make_settings(tmp_path, "sqlite", collective_timeout_s=4.0)
    register(settings)
    workers(settings)
    scheduler(settings)
    c = client_for(settings)
    cfg = dict(TINY_SAE, max_steps=100000, checkpoint_every=100000)
    tid = c.post("/api/v1/trainings", json={"name": "hangs", "recipe": "sae", "config": cfg,
                                            "gpu_ids": [0, 1], "max_restarts": 0}).json()["id"]
    body = wait_for(lambda: (b := get_training(c, tid))["step"] >= 2 and b, 120, "progress", 0.2)
    launcher = body["launcher_pid"]
    # The launcher names its ranks in the progress it writes (forked from its rank server, or spawned).
    progress = run_dir(settings, tid) / "progress-1.jsonl"
    [line] = [x for x in map(json.loads, progress.read_text().splitlines()) if x["type"] == "ranks"]
    assert len(line["pids"]) == 2 and set(line["pids"]) <= set(group_members(launcher)), line
    stopped = line["pids"][1]
    os.kill(stopped, signal.SIGSTOP)
    t0 = time.monotonic()
    body = wait_status(c, tid, FINAL, 90)
    took = time.monotonic() - t0
    assert body["status"] == "failed", body
    assert body["exit_code"] == 13, body
    assert body["status_reason"].startswith("collective timeout: rank 0: ") and "Timed out" in body["status_reason"]
    assert took < 30, took  # the configured 4 s timeout and the grace periods; not minutes
    assert not pids_in_group(launcher)
