"""The worker's warm launchers (gpufleet.jobs.warmpool, gpufleet.training.warm).

Real processes throughout: the pool's members are real interpreters that
import torch; the end-to-end test runs a real worker, once with the pool and
once without, and compares what the two trainings reported.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from gpufleet.jobs import warmpool
from gpufleet.jobs.isolation import Isolation
from gpufleet.trainings.environment import training_environment
from gpufleet.users.runas import RunAccount

from support.fleet import FINAL, get_events, register, wait_for, wait_status

MLP = {"max_steps": 4, "global_batch_size": 8, "log_every": 1, "checkpoint_every": 2}


def _env() -> dict[str, str]:
    return training_environment(os.environ, PYTHONUNBUFFERED="1")


def test_preload_leaves_cuda_uninitialised() -> None:
    code = ("import torch; from gpufleet.training.warm import preload; preload(); "
            "import sys; print(sys.modules.get('gpufleet.training.trainer') is not None, torch.cuda.is_initialized())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split() == ["True", "False"]


def test_serves_only_recipe_launches_of_the_workers_own_account() -> None:
    pool = warmpool.WarmPool.__new__(warmpool.WarmPool)  # the rule alone: no member started
    pool.env = warmpool._base_env(_env())
    own = Isolation()
    member = RunAccount("alice", os.geteuid() + 4242, 4242, (), "/home/alice", "mapped")
    env = dict(_env(), GPUFLEET_TRAINING_ID="x")
    assert pool.serves(warmpool.MODULE, env, own)
    assert not pool.serves("gpufleet.trainings.script_launch", env, own)  # a script's own interpreter
    assert not pool.serves(warmpool.MODULE, env, Isolation(account=member))  # another Unix account
    assert not pool.serves(warmpool.MODULE, env, Isolation(account=member, sandboxed=True))
    assert not pool.serves(warmpool.MODULE, dict(env, OMP_NUM_THREADS="3"), own)  # read at import time


def test_pool_refills_and_replaces_a_dead_member(tmp_path: Path) -> None:
    pool = warmpool.WarmPool(1, _env())
    try:
        wait_for(lambda: pool.ready_count() == 1, 300, "a ready member")
        [first] = pool.pids()
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: pool.ready_count() == 1 and pool.pids() != [first], 300, "the dead member replaced")
        [second] = pool.pids()
        # A member given a training becomes its launcher (here: a spec that does not exist) and leaves the pool.
        proc, lifeline = pool.take(dict(_env(), GPUFLEET_TRAINING_ID="t"), str(tmp_path / "missing.json"))
        assert proc.pid == second
        out = proc.stdout.read().decode()
        assert proc.wait(60) != 0 and "missing.json" in out
        os.close(lifeline)
        wait_for(lambda: pool.ready_count() == 1 and pool.pids() not in ([first], [second]), 300, "the pool refilled")
        assert pool.started == 3
    finally:
        pool.close()
    assert all(not _alive(p) for p in (first, second))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _run_one(c, settings, name: str) -> tuple[dict, list[dict], list[dict], str]:
    r = c.post("/api/v1/trainings", json={"name": name, "recipe": "mlp", "config": MLP, "gpu_ids": [0],
                                          "host": settings.host_name})
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    body = wait_status(c, tid, FINAL, 300)
    metrics = c.get(f"/api/v1/trainings/{tid}/metrics").json()["data"]
    logs = c.get(f"/api/v1/trainings/{tid}/logs?tail=200").json()["text"]
    return body, get_events(c, tid), metrics, logs


@pytest.mark.slow
def test_a_warm_rank_trains_and_reports_like_a_cold_one(tmp_path, client_for, workers, scheduler) -> None:
    from support.fleet import make_settings

    settings = make_settings(tmp_path, "sqlite", warm_pool_size=1)
    register(settings)
    scheduler(settings)
    c = client_for(settings)
    w = workers(settings)
    wait_for(lambda: "is ready" in w.output() and any(_is_warm_child(p, w.proc.pid) for p in _pids()), 300,
             "the worker's warm launcher")
    warm_body, warm_events, warm_metrics, warm_log = _run_one(c, settings, "warm")
    assert "is warm launcher" in warm_log
    w.stop()
    cold = make_settings(tmp_path, "sqlite", warm_pool_size=0, host_name=settings.host_name)
    workers(cold)
    cold_body, cold_events, cold_metrics, cold_log = _run_one(c, settings, "cold")
    assert "is warm launcher" not in cold_log
    for body in (warm_body, cold_body):
        assert body["status"] == "succeeded" and body["step"] == MLP["max_steps"] and body["exit_code"] == 0
    assert [(e["kind"], e["status"]) for e in warm_events] == [(e["kind"], e["status"]) for e in cold_events]
    assert [m["step"] for m in warm_metrics] == [m["step"] for m in cold_metrics] == [1, 2, 3, 4]
    assert all(m["loss"] is not None for m in warm_metrics)


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _is_warm_child(pid: int, parent: int) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return False
    return ppid == parent and b"gpufleet.training.warm" in cmd
