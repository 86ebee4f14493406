"""Sweeps on a real worker: the API, the scheduler loop (which drives sweeps), a Celery worker process, real
launchers and ranks on simulated GPUs (CPU ranks). Tiny MLP trials of a few steps keep it short."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import select

from gpufleet.db.models import GPU, GPUAllocation, Training
from gpufleet.db.session import session_scope
from support.fleet import make_settings, register, wait_for

from .conftest import TINY_MLP

pytestmark = pytest.mark.slow
GIB = 2**30


def _sweep(c, sid):
    r = c.get(f"/api/v1/sweeps/{sid}")
    assert r.status_code == 200, r.text
    return r.json()


def _utc(d: datetime) -> datetime:
    return d if d.tzinfo else d.replace(tzinfo=UTC)


def _first_end(c, tid) -> datetime:
    """When a trial's training first ended (at its first rung, for one promoted after)."""
    events = c.get(f"/api/v1/trainings/{tid}/events").json()["data"]
    return min(_utc(datetime.fromisoformat(e["time"])) for e in events
               if e["kind"] == "status" and e["status"] in ("succeeded", "cancelled", "failed"))


def _allocations(s, sid):
    with session_scope(s) as sess:
        rows = sess.execute(select(GPUAllocation.gpu_index, GPUAllocation.reserved_memory, GPUAllocation.allocated_at,
                                   GPUAllocation.released_at, GPUAllocation.training_id)
                            .join(Training, Training.id == GPUAllocation.training_id)
                            .where(Training.sweep_id == uuid.UUID(sid))).all()
        total = {g.index: g.memory_total for g in sess.scalars(select(GPU))}
    return rows, total


def _peak_overlap(rows):
    """Per GPU: the most trials held at once and the most memory reserved at once."""
    peaks: dict[int, tuple[int, int]] = {}
    for gpu in {r[0] for r in rows}:
        mine = [r for r in rows if r[0] == gpu]
        for _, _, start, _, _ in mine:
            live = [r for r in mine if r[2] <= start and (r[3] is None or r[3] > start)]
            n, mem = len(live), sum(r[1] or 0 for r in live)
            peaks[gpu] = (max(n, peaks.get(gpu, (0, 0))[0]), max(mem, peaks.get(gpu, (0, 0))[1]))
    return peaks


def test_a_12_trial_grid_runs_packed_on_2_gpus_and_names_the_best(tmp_path, request, sweep_client, workers, scheduler):
    s = make_settings(tmp_path, "postgresql", request, simulate="2xH100-80GB", gpu={"max_models_per_gpu": 4})
    register(s)
    workers(s)
    scheduler(s)
    c = sweep_client(s)
    # 30 GiB a trial: memory, not the model count (4), limits a GPU to 2 trials at once.
    r = c.post("/api/v1/sweeps", json={
        "name": "grid12", "recipe": "mlp", "config": TINY_MLP, "memory_mb": 30 * 1024, "parallel": 12,
        "max_restarts": 10,
        "space": {"lr": {"low": 0.0001, "high": 0.1, "log": True, "count": 4}, "hidden": [[4], [8], [16]]}})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    body = wait_for(lambda: (b := _sweep(c, sid))["status"] != "running" and b, 600, "the sweep to end", 1.0)
    assert body["status"] == "succeeded", body
    assert body["trials_by_state"] == {"complete": 12}
    best = min(body["trials"], key=lambda t: t["metric"])
    assert body["best"]["number"] == best["number"] and body["best_trial"] == best["number"]
    rows, total = _allocations(s, sid)
    peaks = _peak_overlap(rows)
    # Every trial held a GPU and let it go; a trial whose lease ran out on a loaded machine ran again (an
    # allocation per attempt), which max_restarts allows.
    assert len({r[4] for r in rows}) == 12 and all(r[3] is not None for r in rows)
    # Packed: several trials on one GPU at once, never more than its memory.
    assert max(n for n, _ in peaks.values()) == 2, peaks
    assert all(mem <= total[g] for g, (_, mem) in peaks.items()), (peaks, total)


def test_sync_asha_stops_the_worse_half_at_the_first_rung_and_resumes_the_rest(tmp_path, request, sweep_client,
                                                                                workers, scheduler):
    s = make_settings(tmp_path, "sqlite", request, simulate="2xH100-80GB")
    register(s)
    workers(s)
    scheduler(s)
    c = sweep_client(s)
    cfg = dict(TINY_MLP, max_steps=8, checkpoint_every=4)
    r = c.post("/api/v1/sweeps", json={
        "name": "asha", "recipe": "mlp", "config": cfg, "parallel": 2,
        "asha": {"min_steps": 4, "reduction_factor": 2, "sync": True},
        "space": {"lr": [0.05, 0.00001, 0.02, 0.000001]}})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    body = wait_for(lambda: (b := _sweep(c, sid))["status"] != "running" and b, 600, "the sweep to end", 1.0)
    assert body["status"] == "succeeded", body
    by_lr = {t["params"]["lr"]: t for t in body["trials"]}
    # The tiny learning rates barely move the loss in 4 steps: they are the worse half, stopped at step 4.
    assert {lr: t["state"] for lr, t in by_lr.items()} == {
        0.05: "complete", 0.02: "complete", 0.00001: "pruned", 0.000001: "pruned"}, body["trials"]
    assert all(by_lr[lr]["step"] == 4 for lr in (0.00001, 0.000001))
    with session_scope(s) as sess:
        rows = {t.config["lr"]: t for t in sess.scalars(select(Training).where(Training.sweep_id == uuid.UUID(sid)))}
        # Two at a time: the last two started on GPUs the first two freed at the rung. (Which trials come
        # first is the sampler's draw; a promoted one's finished_at is its last end, so take its first.)
        first = sorted(rows.values(), key=lambda t: t.created_at)[:2]
        later = sorted(rows.values(), key=lambda t: t.created_at)[2:]
    freed = min(_first_end(c, t.id) for t in first)
    assert all(_utc(t.created_at) >= freed for t in later)
    for lr in (0.05, 0.02):
        events = c.get(f"/api/v1/trainings/{by_lr[lr]['training_id']}/events").json()["data"]
        assert any("resumed" in (e["reason"] or "") for e in events), events
        assert by_lr[lr]["step"] == 8 and by_lr[lr]["training_status"] == "succeeded"
    assert body["best"]["params"]["lr"] in (0.05, 0.02)


def test_cancel_stops_every_trial_and_a_restarted_server_goes_on(tmp_path, request, sweep_client, workers):
    from gpufleet.jobs.scheduler_loop import start as start_loop
    from gpufleet.sweeps import study

    s = make_settings(tmp_path, "postgresql", request, simulate="2xH100-80GB")
    register(s)
    workers(s)
    stop = threading.Event()
    loop = start_loop(s, stop)
    c = sweep_client(s)
    long = c.post("/api/v1/sweeps", json={
        "name": "long", "recipe": "mlp", "config": dict(TINY_MLP, max_steps=1_000_000), "parallel": 3,
        "space": {"lr": [0.1, 0.01, 0.001, 0.0001]}}).json()
    short = c.post("/api/v1/sweeps", json={
        "name": "short", "recipe": "mlp", "config": TINY_MLP, "parallel": 1,
        "space": {"lr": [0.1, 0.01, 0.001]}}).json()
    try:
        wait_for(lambda: _sweep(c, short["id"])["trials_by_state"].get("complete"), 300, "a short trial done", 0.5)
        # The server's loop goes away mid-sweep, with its process's Optuna state ...
        stop.set()
        loop.join(30)
        study._STORAGES.clear()
        assert _sweep(c, short["id"])["status"] == "running"
        # ... and a new one goes on from the database.
        stop = threading.Event()
        loop = start_loop(s, stop)
        wait_for(lambda: sum(t["training_status"] == "running" for t in _sweep(c, long["id"])["trials"]) == 3, 300,
                 "three long trials running", 0.5)
        r = c.post(f"/api/v1/sweeps/{long['id']}/cancel")
        assert r.status_code == 200 and r.json()["status"] == "cancelled"
        def all_cancelled():
            b = _sweep(c, long["id"])
            return all(t["training_status"] == "cancelled" for t in b["trials"]) and b

        body = wait_for(all_cancelled, 120, "every long trial cancelled", 0.5)
        assert {t["state"] for t in body["trials"]} == {"cancelled"} and len(body["trials"]) == 3
        done = wait_for(lambda: (b := _sweep(c, short["id"]))["status"] != "running" and b, 300, "short sweep end", 1.0)
        assert done["status"] == "succeeded" and done["trials_by_state"] == {"complete": 3}
        assert sorted(t["number"] for t in done["trials"]) == [0, 1, 2]  # no trial started twice
    finally:
        stop.set()
        loop.join(30)


def _hogs(n: int) -> list:
    """CPU hogs beside the sweep: a loaded machine, where the driver's verdict comes late."""
    import subprocess
    import sys

    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def test_async_halving_stops_a_trial_at_its_rung_on_a_loaded_machine(tmp_path, request, sweep_client, workers,
                                                                     scheduler):
    import os

    s = make_settings(tmp_path, "sqlite", request, simulate="2xH100-80GB")
    register(s)
    workers(s)
    scheduler(s)
    c = sweep_client(s)
    hogs = _hogs(os.cpu_count() or 2)
    try:
        # Steps of a few milliseconds: a verdict a second late is hundreds of steps, unless the trial waits.
        cfg = dict(TINY_MLP, max_steps=300, log_every=50)
        r = c.post("/api/v1/sweeps", json={
            "name": "loaded", "recipe": "mlp", "config": cfg, "parallel": 4, "max_restarts": 5,
            "asha": {"min_steps": 10, "reduction_factor": 4},  # rungs at steps 10, 40 and 160
            "space": {"lr": [0.05, 0.0000001, 0.02, 0.00000001]}})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        body = wait_for(lambda: (b := _sweep(c, sid))["status"] != "running" and b, 600, "the sweep to end", 1.0)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert body["status"] == "succeeded", body
    pruned = [t for t in body["trials"] if t["state"] == "pruned"]
    assert pruned, body["trials"]
    rungs = {0: 10, 1: 40, 2: 160}
    for t in pruned:
        # Stopped where it was judged: its reason and its rung name the same rung, its training ended pruned
        # (not a red cancelled), and it ran no step past that rung's step (it waited there for the verdict, and
        # the stop that ended the wait checkpointed there).
        assert t["reason"].startswith(f"stopped at rung {t['rung']} (step {rungs[t['rung']]})"), t
        assert t["training_status"] == "pruned", t
        assert t["step"] == rungs[t["rung"]], t
    done = [t for t in body["trials"] if t["state"] == "complete"]
    assert done and all(t["step"] == 300 and t["training_status"] == "succeeded" for t in done), body["trials"]


# A member's own training script: it reports a loss that falls faster the larger its --lr, and the
# process id it runs in. A poor learning rate is also slow (as a poor trial that would run long), so
# the test sees it stopped where it was judged rather than finished.
HALVING_SCRIPT = '''\
import argparse
import os
import time

import gpufleet_report

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float)
p.add_argument("--steps", type=int)
args = p.parse_args()
for step in range(1, args.steps + 1):
    gpufleet_report.report(step=step, loss=1.0 / (1.0 + args.lr * step), pid=os.getpid())
    time.sleep(0.2 if args.lr >= 0.1 else 1.0)
print("done", flush=True)
'''


def _event_time(c, tid, text: str) -> datetime:
    events = c.get(f"/api/v1/trainings/{tid}/events").json()["data"]
    return next(_utc(datetime.fromisoformat(e["time"])) for e in events if text in (e["reason"] or ""))


def test_a_script_sweep_with_async_halving_runs_end_to_end(tmp_path, request, sweep_client, workers, scheduler):
    from gpufleet.db.models import TrainingMetric
    from gpufleet.db.session import write_session
    from gpufleet.trainings.archive import pack
    from gpufleet.trainings.code import store
    from support.scripts import write_project

    s = make_settings(tmp_path, "sqlite", request, simulate="1xH100-80GB")
    register(s)
    workers(s)
    scheduler(s)
    c = sweep_client(s)
    with write_session(s) as sess:
        info, _ = store(sess, s, pack(write_project(tmp_path / "code", HALVING_SCRIPT)), "local")
    # One GPU, one trial at a time; grid seed 5 starts lr 1.0, then 0.001, then 0.5.
    r = c.post("/api/v1/sweeps", json={
        "name": "script-asha", "parallel": 1, "seed": 5, "space": {"lr": [1.0, 0.001, 0.5]},
        "asha": {"min_steps": 5, "reduction_factor": 2, "max_steps": 40},  # rungs at steps 5, 10 and 20
        "script": {"code": info.hash, "argv": ["python", "train.py", "--lr", "{lr}", "--steps", "40"],
                   "memory": "1GiB"}})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    body = wait_for(lambda: (b := _sweep(c, sid))["status"] != "running" and b, 300, "the sweep to end", 1.0)
    assert body["status"] == "succeeded", body
    by_n = {t["number"]: t for t in body["trials"]}
    assert [by_n[n]["params"]["lr"] for n in (0, 1, 2)] == [1.0, 0.001, 0.5]
    first, poor, third = by_n[0], by_n[1], by_n[2]
    # The first trial was promoted at each rung as it ran, and kept running: one process (the same pid
    # at every reported step), one attempt, no stop, no resume, to its 40th step.
    assert first["state"] == "complete" and first["step"] == 40 and first["training_status"] == "succeeded"
    events = c.get(f"/api/v1/trainings/{first['training_id']}/events").json()["data"]
    promoted = [e["reason"].split(" (")[0] for e in events if "promoted at rung" in (e["reason"] or "")]
    # Judged while it ran (the rungs it passed before the driver's round came, in one round).
    assert promoted and promoted == ["promoted at rung 0", "promoted at rung 1", "promoted at rung 2"][:len(promoted)]
    assert sum(e["kind"] == "status" and e["status"] == "running" for e in events) == 1, events
    assert not any("resum" in (e["reason"] or "") or e["kind"] == "cancel" for e in events), events
    with session_scope(s) as sess:
        pids = {m.metrics.get("pid") for m in sess.scalars(select(TrainingMetric).where(
            TrainingMetric.training_id == uuid.UUID(first["training_id"])))}
        attempts = {t.id: t.attempt for t in sess.scalars(select(Training).where(Training.sweep_id == uuid.UUID(sid)))}
    assert len(pids) == 1 and None not in pids, pids
    assert attempts[uuid.UUID(first["training_id"])] == 1
    # The poor trial was judged at rung 0 against the first one's value there, and stopped while running:
    # its training cancelled long before its 40 slow steps; the third trial was started in that round.
    assert poor["state"] == "pruned" and poor["training_status"] == "pruned" and poor["step"] < 40, poor
    pruned_at = _event_time(c, poor["training_id"], "stopped at rung 0")
    with session_scope(s) as sess:
        created = {str(t.id): _utc(t.created_at) for t in sess.scalars(
            select(Training).where(Training.sweep_id == uuid.UUID(sid)))}
    # The pruned trial's GPU is released as its cancel ends (the sweep may be judged done a moment before).
    releases = wait_for(lambda: (rows := _releases(s, sid)) and all(rel is not None for _, rel in rows) and rows,
                        60, "every trial's GPU to be released", 0.5)
    released = {}
    for tid, rel in releases:  # an allocation per attempt: the last one's release
        released[str(tid)] = max(released.get(str(tid), _utc(rel)), _utc(rel))
    assert pruned_at <= created[third["training_id"]] <= released[poor["training_id"]]
    assert third["state"] in ("pruned", "complete")  # it had the same rung-0 rival; its speed decides which
    assert body["best"]["params"] == {"lr": 1.0}


def _releases(s, sid):
    with session_scope(s) as sess:
        return sess.execute(select(GPUAllocation.training_id, GPUAllocation.released_at)
                            .join(Training, Training.id == GPUAllocation.training_id)
                            .where(Training.sweep_id == uuid.UUID(sid))).all()
