"""50 concurrent creates, trainings across hosts and on one host, three scheduling passes at once:
no training ever holds part of its GPUs, and no GPU is held twice.

An observer reads the active allocations in one statement (one snapshot) again
and again while it runs; afterwards PostgreSQL's ``xmin`` of each allocation
row shows that a gang's rows were written, and released, by one transaction.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from gpufleet.db.models import FINAL_STATUSES, GPUAllocation, Training
from gpufleet.db.session import session_scope
from gpufleet.jobs.supervisor import _claim, _finish
from gpufleet.lifecycle import outcome
from gpufleet.scheduling.scheduler import schedule_pending
from sqlalchemy import func, select, text

from support.fleet import make_settings, register, unique
from .test_concurrency import _overlaps

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

N = 50


def test_50_concurrent_gang_and_single_creates_never_hold_part(tmp_path, request, live_api):
    hosts = [make_settings(tmp_path / n, "postgresql", request, simulate="2xH100-80GB", host_name=unique(n))
             for n in ("a", "b", "c")]
    ids = {s.host_name: register(s) for s in hosts}
    settings = hosts[0]
    base = live_api(settings)
    rnd = random.Random(14)
    bodies = []
    for i in range(N):
        body = {"name": f"c{i}", "recipe": "mlp", "config": {"max_steps": 2, "global_batch_size": 12}}
        kind = rnd.random()
        if kind < 0.35:
            body.update(hosts=2, gpus_per_host=2)
        elif kind < 0.55:
            body.update(world_size=3, spread="auto")
        elif kind < 0.7:
            body.update(hosts=[h.host_name for h in rnd.sample(hosts, 3)], gpus_per_host=1)
        else:
            body.update(world_size=rnd.choice([1, 2]))
        bodies.append(body)
    stop = threading.Event()
    errors: list[BaseException] = []
    partial: list[tuple] = []
    seen = {"gangs": 0}

    def guard(fn):
        def run():
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)
        return run

    def scheduler_loop():
        while not stop.is_set():
            schedule_pending(settings, None)
            time.sleep(0.02)

    def finisher():
        # Claims scheduled trainings on their rank-0 host and ends them as the worker does.
        while not stop.is_set():
            with session_scope(settings) as sess:
                rows = sess.execute(select(Training.id, Training.host_id).where(
                    Training.status == "scheduled")).all()
            for tid, host_id in rows:
                name = next(n for n, i in ids.items() if i == host_id)
                t = _claim(settings, settings, tid, host_id, name, f"{name}:test")
                if t is not None:
                    ending = "succeeded" if rnd.random() < 0.8 else "queued"
                    _finish(settings, t, f"{name}:test", outcome.Decision(ending, "finished"), 0)
            time.sleep(0.01)

    def observer():
        while not stop.is_set():
            with session_scope(settings) as sess:
                held = sess.execute(select(GPUAllocation.training_id, func.count(), Training.world_size)
                                    .join(Training, Training.id == GPUAllocation.training_id)
                                    .where(GPUAllocation.released_at.is_(None))
                                    .group_by(GPUAllocation.training_id, Training.world_size)).all()
            partial.extend(row for row in held if row[1] != row[2])
            seen["gangs"] += sum(1 for row in held if row[2] > 2)
            time.sleep(0.005)

    threads = [threading.Thread(target=guard(scheduler_loop)) for _ in range(3)]
    threads += [threading.Thread(target=guard(finisher)), threading.Thread(target=guard(observer))]
    for t in threads:
        t.start()
    created: list[str] = []
    try:
        with httpx.Client(base_url=base, timeout=60) as http:
            def post(body):
                r = http.post("/api/v1/trainings", json=body)
                assert r.status_code == 201, r.text
                return r.json()["id"]

            with ThreadPoolExecutor(8) as pool:
                created.extend(pool.map(post, bodies))
            for tid in rnd.sample(created, 5):
                assert http.post(f"/api/v1/trainings/{tid}/cancel").status_code == 200
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not errors:
            with session_scope(settings) as sess:
                left = sess.scalar(select(func.count()).select_from(Training).where(
                    Training.id.in_([uuid.UUID(x) for x in created]), Training.status.not_in(FINAL_STATUSES)))
            if not left:
                break
            time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors[0]
    assert not partial, f"a training held part of its GPUs: {partial[:3]}"
    assert seen["gangs"] > 0, "the observer never saw a gang holding its GPUs"
    _check_history(settings, created, hosts)


def _check_history(settings, created, hosts):
    ids = [uuid.UUID(x) for x in created]
    with session_scope(settings) as sess:
        statuses = dict(sess.execute(select(Training.id, Training.status).where(Training.id.in_(ids))).all())
        sizes = dict(sess.execute(select(Training.id, Training.world_size).where(Training.id.in_(ids))).all())
        rows = sess.execute(text(
            "SELECT training_id, host_id, gpu_index, allocated_at, released_at, xmin::text AS tx"
            " FROM gpu_allocations WHERE training_id = ANY(:ids)"), {"ids": ids}).all()
    assert all(s in FINAL_STATUSES for s in statuses.values()), statuses
    assert sum(s == "succeeded" for s in statuses.values()) >= N - 5 - 3
    # Each reservation: the rows a training got together, released together.
    by_placement = defaultdict(list)
    for r in rows:
        by_placement[(r.training_id, r.released_at)].append(r)
    spans = 0
    for (tid, _), placed in by_placement.items():
        assert len(placed) == sizes[tid], (tid, len(placed), sizes[tid])
        # One transaction released them (and so also none was released before the others).
        assert len({r.tx for r in placed}) == 1, (tid, placed)
        spans += len({r.host_id for r in placed}) > 1
    assert spans >= 10, "too few trainings across hosts ran to mean something"
    by_gpu = defaultdict(list)
    for r in rows:
        by_gpu[(r.host_id, r.gpu_index)].append((r.allocated_at, r.released_at, r.training_id))
    assert len(by_gpu) == 2 * len(hosts)
    for gpu, intervals in by_gpu.items():
        assert not _overlaps(intervals), f"GPU {gpu} held by two trainings: {_overlaps(intervals)}"
