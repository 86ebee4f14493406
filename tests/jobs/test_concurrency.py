"""200 concurrent creates for 8 GPUs: no GPU is ever held by two exclusive trainings.

Creates arrive through a real HTTP server from many threads while three
scheduling passes run at once (as if leadership had failed and several API
processes scheduled together) and trainings are claimed, finished and
cancelled through the same code the worker and the API use. Afterwards the
allocation history is checked interval by interval.
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
from gpufleet.db.models import FINAL_STATUSES, GPUAllocation, Training, TrainingEvent
from gpufleet.db.session import session_scope
from gpufleet.jobs.supervisor import _claim, _finish
from gpufleet.lifecycle import outcome
from gpufleet.scheduling.scheduler import schedule_pending
from sqlalchemy import select

from support.fleet import make_settings, register

N = 200


def _overlaps(intervals):
    """Pairs of (start, end, id) that overlap in time; end None = still held."""
    far = max((e or s for s, e, _ in intervals), default=None)
    iv = sorted((s, e or far, i) for s, e, i in intervals)
    bad = []
    for (_, e1, a), (s2, _, b) in zip(iv, iv[1:]):
        if s2 < e1:
            bad.append((a, b))
    return bad


@pytest.mark.slow
def test_200_concurrent_creates_never_double_book(tmp_path, backend, request, live_api):
    settings = make_settings(tmp_path, backend, request, simulate="8xH100-80GB")
    host_id = register(settings)
    base = live_api(settings)
    rnd = random.Random(7)
    bodies = []
    for i in range(N):
        kind = rnd.random()
        body = {"name": f"c{i}", "recipe": "mlp", "config": {"max_steps": 2, "global_batch_size": 8},
                "host": settings.host_name, "priority": rnd.randint(0, 3)}
        if kind < 0.5:
            body["gpu_ids"] = rnd.sample(range(8), rnd.choice([1, 2, 4]))
        elif kind < 0.8:
            body["world_size"] = rnd.choice([1, 2])
        bodies.append(body)

    stop = threading.Event()
    errors: list[BaseException] = []

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

    worker_id = f"{settings.host_name}:test"

    def finisher():
        # Claims scheduled trainings and ends them the way the worker does.
        while not stop.is_set():
            with session_scope(settings) as sess:
                ids = list(sess.execute(select(Training.id).where(
                    Training.host_id == host_id, Training.status == "scheduled")).scalars())
            for tid in ids:
                t = _claim(settings, settings, tid, host_id, settings.host_name, worker_id)
                if t is not None:
                    _finish(settings, t, worker_id, outcome.Decision("succeeded", "finished"), 0)
            time.sleep(0.01)

    threads = [threading.Thread(target=guard(scheduler_loop)) for _ in range(3)]
    threads.append(threading.Thread(target=guard(finisher)))
    for t in threads:
        t.start()

    created: list[str] = []
    try:
        _create_and_drain(settings, base, bodies, created, rnd, errors)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors[0]
    _check_history(settings, created)


def _create_and_drain(settings, base, bodies, created, rnd, errors):
    with httpx.Client(base_url=base, timeout=60) as http:
        def post(body):
            r = http.post("/api/v1/trainings", json=body)
            assert r.status_code == 201, r.text
            return r.json()["id"]

        with ThreadPoolExecutor(8) as pool:
            created.extend(pool.map(post, bodies))
        # Cancel a few while everything still runs, through the API.
        for tid in rnd.sample(created, 20):
            r = http.post(f"/api/v1/trainings/{tid}/cancel")
            assert r.status_code == 200, r.text

    def drained():
        with session_scope(settings) as sess:
            left = sess.execute(select(Training.status).where(
                Training.id.in_([uuid.UUID(x) for x in created]),
                Training.status.not_in(FINAL_STATUSES))).scalars().all()
        return not left

    deadline = time.monotonic() + 120
    while not drained() and time.monotonic() < deadline and not errors:
        time.sleep(0.2)


def _check_history(settings, created):
    ids = [uuid.UUID(x) for x in created]
    with session_scope(settings) as sess:
        statuses = dict(sess.execute(select(Training.id, Training.status).where(Training.id.in_(ids))).all())
        allocs = sess.execute(select(GPUAllocation).where(GPUAllocation.training_id.in_(ids))).scalars().all()
        events = sess.execute(select(TrainingEvent.training_id, TrainingEvent.seq)
                              .where(TrainingEvent.training_id.in_(ids))).all()
    assert len(statuses) == N
    assert all(s in FINAL_STATUSES or s == "queued" for s in statuses.values()), statuses
    assert sum(s == "succeeded" for s in statuses.values()) >= N - 20 - 5

    by_gpu = defaultdict(list)
    for a in allocs:
        assert a.exclusive
        by_gpu[a.gpu_index].append((a.allocated_at, a.released_at, a.training_id))
    assert set(by_gpu) == set(range(8))
    for gpu, intervals in by_gpu.items():
        assert not _overlaps(intervals), f"GPU {gpu} held by two exclusive trainings: {_overlaps(intervals)}"
    # The history is rich enough to mean something: every GPU changed hands many times.
    assert min(len(v) for v in by_gpu.values()) >= 10

    # Event numbers are gapless per training.
    seqs = defaultdict(list)
    for tid, seq in events:
        seqs[tid].append(seq)
    for tid, s in seqs.items():
        assert sorted(s) == list(range(1, len(s) + 1)), (tid, sorted(s))


def test_overlap_check_sees_overlap():
    from datetime import datetime, timedelta, timezone

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    s = timedelta(seconds=1)
    assert _overlaps([(t0, t0 + 2 * s, "a"), (t0 + s, t0 + 3 * s, "b")]) == [("a", "b")]
    assert _overlaps([(t0, t0 + s, "a"), (t0 + s, t0 + 3 * s, "b")]) == []
    assert _overlaps([(t0, None, "a"), (t0 + s, t0 + 3 * s, "b")]) == [("a", "b")]
