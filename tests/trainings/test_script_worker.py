"""Script trainings end to end: `gpufleet run`, a real server, scheduler, Celery worker and rank processes.

The GPUs are simulated (the ranks run on CPU with gloo); the user's script is
written here as a user would write it for torchrun.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from gpufleet.db.models import Training, TrainingMetric
from gpufleet.db.session import session_scope
from support.fleet import make_settings, pids_in_group, register, wait_for

from support.scripts import RESUMABLE_SCRIPT, write_project

pytestmark = pytest.mark.slow
FINAL = ("succeeded", "failed", "cancelled", "reclaimed")


def _run_cli(base: str, project: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env.update(GPUFLEET_SERVER=base, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "gpufleet.cli", "run", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _get(base: str, tid: str) -> dict:
    return httpx.get(f"{base}/api/v1/trainings/{tid}", timeout=30).json()


def _wait(base: str, tid: str, statuses: tuple[str, ...], timeout: float) -> dict:
    return wait_for(lambda: (b := _get(base, tid))["status"] in statuses and b, timeout, f"status in {statuses}", 0.2)


def _log(base: str, tid: str) -> str:
    return httpx.get(f"{base}/api/v1/trainings/{tid}/logs", params={"offset": 0}, timeout=30).json()["text"]


def _submitted_id(out: str) -> str:
    return next(line.split()[1] for line in out.splitlines() if line.startswith("submitted "))


def test_gpufleet_run_unmodified_ddp_script_on_two_gpus(tmp_path, workers, scheduler, live_server):
    settings = make_settings(tmp_path, "sqlite")
    register(settings)
    workers(settings)
    scheduler(settings)
    base = live_server(settings)
    project = write_project(tmp_path / "proj")
    (project / "notes.log").write_text("not uploaded\n")
    (project / ".gitignore").write_text("*.log\n")
    res = _run_cli(base, project, "--gpus", "2", "--memory", "1GiB", "--", "python", "train.py", "--steps", "3")
    assert res.returncode == 0, res.stdout + res.stderr
    tid = _submitted_id(res.stdout)
    body = _get(base, tid)
    assert body["status"] == "succeeded" and body["kind"] == "script" and body["world_size"] == 2
    assert body["argv"] == ["python", "train.py", "--steps", "3"] and len(body["code_hash"]) == 64
    log = _log(base, tid)
    for rank in (0, 1):
        assert f"[rank {rank}] step 2 loss" in log
    assert "[rank 0] done" in log
    # The followed log reached the terminal too.
    assert "[rank 1] step 2 loss" in res.stderr
    # The work dir is gone once the training ended; the code stays stored.
    assert not (settings.data_dir / "work" / tid).exists()
    # Uploading the same code again sends nothing.
    again = _run_cli(base, project, "--gpus", "1", "--memory", "1GiB", "--no-follow", "--", "python", "train.py")
    assert again.returncode == 0 and "on the server already" in again.stderr


def test_rank_death_fails_the_job_naming_the_rank(tmp_path, workers, scheduler, live_server):
    settings = make_settings(tmp_path, "sqlite")
    register(settings)
    workers(settings)
    scheduler(settings)
    base = live_server(settings)
    project = write_project(tmp_path / "proj")
    res = _run_cli(base, project, "--gpus", "2", "--memory", "1GiB", "--max-restarts", "0", "--",
                   "python", "train.py", "--steps", "100000", "--fail-rank", "1", "--sleep", "0.05")
    assert res.returncode == 1, res.stdout + res.stderr
    body = _get(base, _submitted_id(res.stdout))
    assert body["status"] == "failed" and body["exit_code"] == 12
    assert "rank 1 exited with code 3" in body["status_reason"]
    assert "something went wrong in my code" in body["status_reason"]
    assert not pids_in_group(body["launcher_pid"])
    events = httpx.get(f"{base}/api/v1/trainings/{body['id']}/events", timeout=30).json()["data"]
    err = next(e for e in events if e["kind"] == "error")
    failed = next(e for e in events if e["status"] == "failed")
    from datetime import datetime

    gap = datetime.fromisoformat(failed["time"]) - datetime.fromisoformat(err["time"])
    assert gap.total_seconds() < 15


def test_cancel_stops_every_rank_within_5s(tmp_path, workers, scheduler, live_server):
    settings = make_settings(tmp_path, "sqlite")
    register(settings)
    workers(settings)
    scheduler(settings)
    base = live_server(settings)
    project = write_project(tmp_path / "proj")
    res = _run_cli(base, project, "--gpus", "2", "--memory", "1GiB", "--no-follow", "--",
                   "python", "train.py", "--steps", "100000", "--sleep", "0.05")
    assert res.returncode == 0, res.stderr
    tid = _submitted_id(res.stdout)
    wait_for(lambda: "[rank 1] step 3" in _log(base, tid), 180, "both ranks training", 0.2)
    group = _get(base, tid)["launcher_pid"]
    members = pids_in_group(group)
    assert len(members) >= 3  # the launcher and its two ranks
    t0 = time.monotonic()
    assert httpx.post(f"{base}/api/v1/trainings/{tid}/cancel", timeout=30).status_code == 200
    wait_for(lambda: not pids_in_group(group), 5, "every rank to stop", 0.05)
    assert time.monotonic() - t0 < 5
    assert _wait(base, tid, FINAL, 60)["status"] == "cancelled"


@pytest.mark.postgres
@pytest.mark.redis
def test_kill9_of_the_worker_resumes_the_script_from_its_checkpoint(tmp_path, request, workers, scheduler,
                                                                     live_server):
    settings = make_settings(tmp_path, "postgresql", request, lease_s=6.0)
    register(settings)
    w1 = workers(settings)
    scheduler(settings)
    base = live_server(settings)
    project = write_project(tmp_path / "proj", RESUMABLE_SCRIPT)
    (project / "salt.txt").write_text(uuid.uuid4().hex)  # its own code hash in the shared database
    res = _run_cli(base, project, "--gpus", "2", "--memory", "1GiB", "--no-follow", "--",
                   "python", "train.py", "--steps", "60", "--sleep", "0.1")
    assert res.returncode == 0, res.stderr
    tid = _submitted_id(res.stdout)
    body = wait_for(lambda: (b := _get(base, tid))["step"] >= 8 and b, 180, "a few reported steps", 0.2)
    ckpt = settings.checkpoint_root / tid
    wait_for(lambda: any(ckpt.glob("step-*.pt")), 60, "a checkpoint")
    old_group = body["launcher_pid"]
    w1.kill9()
    workers(settings)
    wait_for(lambda: not pids_in_group(old_group), 60, "the first attempt's processes to end")
    body = _wait(base, tid, FINAL, 300)
    assert body["status"] == "succeeded", body
    assert body["attempt"] == 2 and body["step"] == 60
    log = _log(base, tid)
    assert "resumed from " in log and "step-0000" in log.split("resumed from ", 1)[1].split()[0]
    with session_scope(settings) as sess:
        steps = sorted(sess.execute(select(TrainingMetric.step).where(
            TrainingMetric.training_id == uuid.UUID(tid))).scalars())
        t = sess.get(Training, uuid.UUID(tid))
    assert steps == list(range(1, 61))
    assert t.measured_peak_memory and t.measured_peak_memory > 0


def test_report_gives_a_loss_curve_through_the_metrics_endpoint(tmp_path, workers, scheduler, live_server):
    settings = make_settings(tmp_path, "sqlite")
    register(settings)
    workers(settings)
    scheduler(settings)
    base = live_server(settings)
    project = write_project(tmp_path / "proj", RESUMABLE_SCRIPT)
    res = _run_cli(base, project, "--gpus", "2", "--memory", "1GiB", "--", "python", "train.py", "--steps", "12")
    assert res.returncode == 0, res.stdout + res.stderr
    tid = _submitted_id(res.stdout)
    metrics = httpx.get(f"{base}/api/v1/trainings/{tid}/metrics", timeout=30).json()["data"]
    assert [m["step"] for m in metrics] == list(range(1, 13))
    assert all(isinstance(m["loss"], float) and m["metrics"]["lr"] == 0.05 for m in metrics)
    assert all(len(m["rank_step_times"]) == 2 for m in metrics[1:])
    body = _get(base, tid)
    assert body["step"] == 12 and body["last_loss"] == metrics[-1]["loss"]
    # The ranks' measured peak is kept: the next run of the same code may omit --memory. It is
    # NVML's figure for the rank's process (the simulated context and more), as for a recipe.
    assert body["measured_peak_memory"] > settings.sim_context_mb * 2**20
    assert len(body["peak_memory_per_rank"]) == 2
    again = _run_cli(base, project, "--gpus", "2", "--no-follow", "--", "python", "train.py", "--steps", "2")
    assert again.returncode == 0, again.stderr
    t2 = _get(base, _submitted_id(again.stdout))
    assert t2["estimate"]["source"] == "measured" and t2["memory_estimate"] == body["measured_peak_memory"]
