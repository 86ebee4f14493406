"""How a training survives its worker going away: killed (SIGKILL) or asked to stop (SIGTERM, SIGINT).

Real Celery worker processes, the real launcher and its DDP ranks, PostgreSQL
and Redis. A watcher samples the machine's processes all along and records
every moment at which launcher groups of more than one attempt were alive.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from gpufleet.db.models import Host, TrainingMetric
from gpufleet.db.session import session_scope
from sqlalchemy import select, update

from support.servers import free_port, serve_process

from support.fleet import (
    FINAL, TINY_SAE, get_events, get_training, make_settings, pids_in_group, register, unique, wait_for,
    wait_status,
)

pytestmark = pytest.mark.slow

def _steps(settings, tid):
    with session_scope(settings) as sess:
        return list(sess.execute(select(TrainingMetric.step).where(
            TrainingMetric.training_id == uuid.UUID(tid)).order_by(TrainingMetric.step)).scalars())


def running(pid: int) -> bool:
    """Alive and not a zombie (a dead process its new parent has not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def launcher_groups(tid: str) -> dict[int, int]:
    """{launcher pgid: attempt} for every live launcher of training ``tid`` (with members alive)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"gpufleet.engine.launch" not in cmd:
            continue
        spec = next((a.decode() for a in cmd if tid.encode() in a and a.endswith(b".json")), None)
        if spec is None:
            continue
        attempt = int(Path(spec).stem.split("-")[-1])
        if pids_in_group(int(entry.name)):
            out[int(entry.name)] = attempt
    return out


class AttemptWatch:
    """Samples the launcher groups of one training until stopped."""

    def __init__(self, tid: str):
        self.tid = tid
        self.overlaps: list[dict[int, int]] = []
        self.seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            groups = launcher_groups(self.tid)
            self.seen.update(groups.values())
            if len(set(groups.values())) > 1:
                self.overlaps.append(groups)
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.mark.postgres
@pytest.mark.redis
def test_kill9_worker_stops_its_training_and_it_resumes_on_another_host(
        tmp_path, request, client_for, workers, scheduler):
    # A lease a loaded machine renews in time (about once a second), still short
    # enough that the retry starts soon after the kill.
    a = make_settings(tmp_path, "postgresql", request, lease_s=6.0, host_name=unique("host-a"))
    b = a.model_copy(update={"host_name": unique("host-b")})
    register(a)
    wa = workers(a)
    scheduler(a)
    c = client_for(a)
    cfg = dict(TINY_SAE, max_steps=300, checkpoint_every=5)
    # No GPUs named: the server places it, and may place the retry elsewhere.
    tid = c.post("/api/v1/trainings", json={"name": "survivor", "recipe": "sae", "config": cfg,
                                            "world_size": 2}).json()["id"]
    watch = AttemptWatch(tid)
    try:
        body = wait_for(lambda: (x := get_training(c, tid))["last_checkpoint"] and x["step"] >= 6 and x, 360,
                        "a checkpoint on host A", 0.2)
        assert body["host_name"] == a.host_name and body["attempt"] == 1
        old_group = body["launcher_pid"]
        register(b)
        workers(b)
        # Host A is going away: the scheduler must not place the retry there.
        with session_scope(a) as sess:
            sess.execute(update(Host).where(Host.name == a.host_name).values(status="offline"))
        members = pids_in_group(old_group)
        assert len(members) >= 3  # the launcher and two ranks
        wa.kill9()
        # They follow the dead worker (the lifeline); how fast is bench/'s to say, not a loaded machine's.
        wait_for(lambda: not any(running(p) for p in members), 120, "the launcher and its ranks to exit", 0.05)
        body = wait_status(c, tid, FINAL, 300)
    finally:
        watch.stop()
    assert body["status"] == "succeeded", body
    assert body["host_name"] == b.host_name and body["attempt"] == 2 and body["restarts"] == 1
    assert watch.seen == {1, 2}
    assert watch.overlaps == []  # never two attempts' processes at once
    retry = [e for e in get_events(c, tid) if e["kind"] == "retry"]
    assert len(retry) == 1 and retry[0]["data"]["retry_kind"] == "lease"
    assert _steps(a, tid) == list(range(1, 301))


@pytest.mark.postgres
@pytest.mark.redis
def test_a_worker_that_cannot_renew_its_lease_stops_its_training_before_another_attempt_starts(
        tmp_path, request, client_for, workers, scheduler):
    from sqlalchemy import create_engine, text

    s = make_settings(tmp_path, "postgresql", request, lease_s=6.0)
    register(s)
    workers(s)
    scheduler(s)
    c = client_for(s)
    cfg = dict(TINY_SAE, max_steps=100000, checkpoint_every=5)
    tid = c.post("/api/v1/trainings", json={"name": "unrenewed", "recipe": "sae", "config": cfg,
                                            "gpu_ids": [0], "host": s.host_name, "max_restarts": 2}).json()["id"]
    watch = AttemptWatch(tid)
    engine = create_engine(s.effective_database_url)
    try:
        body = wait_for(lambda: (x := get_training(c, tid))["last_checkpoint"] and x["step"] >= 6 and x, 360,
                        "a checkpoint", 0.2)
        group = body["launcher_pid"]
        # Hold the training's row: every renewal now waits in the database, as in an outage or a lock storm.
        with engine.connect() as conn:
            conn.execute(text("SELECT 1 FROM trainings WHERE id = :id FOR UPDATE"), {"id": uuid.UUID(tid)})
            wait_for(lambda: not pids_in_group(group), 180, "the worker to stop its own training", 0.05)
            conn.rollback()
        body = wait_for(lambda: (x := get_training(c, tid))["attempt"] == 2 and x["status"] == "running" and x, 360,
                        "the next attempt", 0.2)
        assert c.post(f"/api/v1/trainings/{tid}/cancel").status_code == 200
        wait_status(c, tid, FINAL, 180)
    finally:
        watch.stop()
        engine.dispose()
    assert watch.seen == {1, 2}
    assert watch.overlaps == []  # never two attempts' processes at once
    log = c.get(f"/api/v1/trainings/{tid}/logs").text
    assert "the lease ran out before this worker could renew it" in log, log[-2000:]


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stopped_worker_checkpoints_and_requeues_without_a_restart(tmp_path, request, client_for, workers,
                                                                    scheduler, sig):
    s = make_settings(tmp_path, "postgresql", request, lease_s=3.0, stop_grace_s=60.0)
    register(s)
    w = workers(s)
    scheduler(s)
    c = client_for(s)
    # Checkpoints only at the end, unless it is stopped: the stop itself must checkpoint.
    cfg = dict(TINY_SAE, max_steps=100000, checkpoint_every=100000)
    tid = c.post("/api/v1/trainings", json={"name": "stopped", "recipe": "sae", "config": cfg,
                                            "gpu_ids": [0, 1], "host": s.host_name,
                                            "max_restarts": 0}).json()["id"]
    body = wait_for(lambda: (x := get_training(c, tid))["step"] >= 3 and x, 360, "progress", 0.2)
    group = body["launcher_pid"]
    members = pids_in_group(group)
    w.proc.send_signal(sig)
    w.proc.wait(s.stop_grace_s + 120)
    # Killed processes may take a moment to be reaped; none may keep running.
    wait_for(lambda: not pids_in_group(group), 60, "the launcher group to be gone")
    assert members
    body = get_training(c, tid)
    # Back in the queue (the scheduler may already have placed it again on this host).
    assert body["status"] in ("queued", "scheduled"), body
    assert body["restarts"] == 0 and body["attempt"] == 1
    assert body["last_checkpoint"] and body["last_checkpoint"].endswith(f"step-{body['step']}")
    retry = [e for e in get_events(c, tid) if e["kind"] == "retry"]
    assert len(retry) == 1 and retry[0]["data"]["retry_kind"] == "interrupted", retry
    assert "not counted as a restart" in retry[0]["reason"]
    stopped_at = body["step"]
    # A new worker resumes it from that checkpoint, still with no restart used.
    workers(s)
    body = wait_for(lambda: (x := get_training(c, tid))["attempt"] == 2 and x["step"] > stopped_at + 2 and x, 360,
                    "the resumed attempt to make progress", 0.2)
    assert body["status"] == "running" and body["restarts"] == 0
    steps = _steps(s, tid)
    assert steps[: stopped_at] == list(range(1, stopped_at + 1))
    assert c.post(f"/api/v1/trainings/{tid}/cancel").status_code == 200
    wait_status(c, tid, FINAL, 180)


# Like a terminal's foreground job, serve runs in its own process group: Ctrl-C reaches the whole group.
SERVE_ENV = {"GPUFLEET_HOST_NAME": "serve-host", "GPUFLEET_LEASE_S": "3"}


def _training(base: str, tid: str) -> dict:
    return httpx.get(f"{base}/trainings/{tid}", timeout=10).json()


def _started(base: str, name: str, gpu_ids: list[int], max_restarts: int, checkpoint_every: int) -> tuple[str, dict]:
    """A long training submitted to a served API, once it has made progress: its id and its body."""
    cfg = dict(TINY_SAE, max_steps=100000, checkpoint_every=checkpoint_every)
    r = httpx.post(f"{base}/trainings", json={"name": name, "recipe": "sae", "config": cfg,
                                              "gpu_ids": gpu_ids, "max_restarts": max_restarts}, timeout=30)
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    return tid, wait_for(lambda: (x := _training(base, tid))["step"] >= 3 and x, 360, "progress", 0.2)


def _retries(base: str, tid: str) -> list[dict]:
    return [e for e in httpx.get(f"{base}/trainings/{tid}/events", timeout=10).json()["data"] if e["kind"] == "retry"]


def _cancel(base: str, tid: str) -> None:
    assert httpx.post(f"{base}/trainings/{tid}/cancel", timeout=10).status_code == 200
    wait_for(lambda: _training(base, tid)["status"] == "cancelled", 180, "the cancel")


def test_ctrl_c_on_serve_checkpoints_and_requeues_and_leaves_nothing_running(tmp_path):
    port = free_port()
    with serve_process(tmp_path / "data", port=port, **SERVE_ENV) as srv:
        base = f"{srv.url}/api/v1"
        tid, body = _started(base, "serve-stop", [0, 1], max_restarts=0, checkpoint_every=100000)
        group = body["launcher_pid"]
        assert pids_in_group(group)
        os.killpg(srv.pid, signal.SIGINT)  # Ctrl-C
        srv.proc.wait(300)
        wait_for(lambda: not pids_in_group(group), 60, "the launcher group to be gone")
    # The console said what the stop waited for, and how the training ended up.
    said = srv.log_tail(20000)
    assert "stopping: closing connections" in said, said
    assert f"stopping: asking 1 training(s) to checkpoint: serve-stop ({tid[:8]}); waiting up to" in said, said
    assert "stopped in" in said and "serve-stop queued" in said, said
    assert "Traceback" not in said, said
    # The next start finds it queued as interrupted, with no restart used.
    with serve_process(tmp_path / "data", port=port, **SERVE_ENV):
        retry = _retries(base, tid)
        assert len(retry) == 1 and retry[0]["data"]["retry_kind"] == "interrupted", retry
        body = wait_for(lambda: (x := _training(base, tid))["attempt"] == 2
                        and x["status"] == "running" and x, 360, "the training to resume", 0.2)
        assert body["restarts"] == 0
        _cancel(base, tid)


def _parent_pid(pid: int) -> int:
    # /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces, so split after its ")".
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_killed_embedded_worker_is_started_again_and_its_training_resumes(tmp_path):
    with serve_process(tmp_path / "data", **SERVE_ENV) as srv:
        base = f"{srv.url}/api/v1"
        tid, body = _started(base, "worker-dies", [0], max_restarts=2, checkpoint_every=5)
        group = body["launcher_pid"]
        worker = _parent_pid(group)
        assert _parent_pid(worker) == srv.pid, "the launcher's parent is serve's embedded worker"
        os.kill(worker, signal.SIGKILL)
        # Its launcher follows it (the lifeline); serve starts a worker again, which resumes the training.
        wait_for(lambda: not pids_in_group(group), 60, "the dead worker's launcher group to be gone")
        # `running` is written at the claim, the launcher's pid just after it starts.
        body = wait_for(lambda: (x := _training(base, tid))["attempt"] == 2
                        and x["status"] == "running" and x["launcher_pid"] and x, 540,
                        "the training to resume on a new worker", 0.2)
        assert _parent_pid(body["launcher_pid"]) != worker
        assert "the embedded worker exited with code -9; starting it again" in srv.log_tail(20000), srv.log_tail()
        _cancel(base, tid)


def test_kill9_of_serve_stops_its_worker_and_training_and_the_next_start_resumes_it(tmp_path):
    port = free_port()
    with serve_process(tmp_path / "data", port=port, **SERVE_ENV) as srv:
        base = f"{srv.url}/api/v1"
        tid, body = _started(base, "serve-killed", [0], max_restarts=0, checkpoint_every=100000)
        group = body["launcher_pid"]
        worker = _parent_pid(group)
        assert _parent_pid(worker) == srv.pid
        os.kill(srv.pid, signal.SIGKILL)  # only serve: its worker and the launcher are left to notice
        srv.proc.wait(10)
        # The worker reads EOF on its lifeline and stops as on SIGTERM: the
        # training checkpoints and goes back to the queue, and nothing is left.
        wait_for(lambda: not running(worker) and not pids_in_group(group), 270,
                 "the embedded worker and the launcher group to be gone", 0.2)
    with serve_process(tmp_path / "data", port=port, **SERVE_ENV) as srv2:
        retry = _retries(base, tid)
        assert len(retry) == 1 and retry[0]["data"]["retry_kind"] == "interrupted", retry
        body = wait_for(lambda: (x := _training(base, tid))["attempt"] == 2
                        and x["status"] == "running" and x["launcher_pid"] and x, 360, "the training to resume", 0.2)
        assert body["restarts"] == 0
        assert _parent_pid(_parent_pid(body["launcher_pid"])) == srv2.pid  # the new serve's worker runs it
        _cancel(base, tid)


def test_a_second_worker_of_the_same_host_refuses_to_start_and_names_the_first(tmp_path, workers):
    import subprocess

    from gpufleet.jobs.embedded import settings_env
    from gpufleet.jobs.procs import pid_dir

    settings = make_settings(tmp_path, "sqlite")
    first = workers(settings)
    lock = pid_dir(settings, settings.host_name) / ".worker.lock"
    wait_for(lambda: lock.is_file() and lock.read_text().strip() == str(first.proc.pid), 180,
             "the first worker to hold the host's lock", 0.2)
    second = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli", "worker", "--host-name", settings.host_name, "--no-agent"],
        env=settings_env(settings), capture_output=True, text=True, timeout=120)
    assert second.returncode == 1, second.stderr
    assert f"another worker of host '{settings.host_name}' is running on this machine (pid {first.proc.pid})" \
        in " ".join(second.stderr.split()), second.stderr
    assert first.proc.poll() is None  # the first one is untouched
    first.kill9()
    # The kernel drops a killed worker's lock: the next one starts.
    third = workers(settings)
    wait_for(lambda: lock.read_text().strip() == str(third.proc.pid), 180, "the next worker to take the lock", 0.2)
