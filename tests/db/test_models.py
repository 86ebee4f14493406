"""The data model's guarantees, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from gpufleet.db.models import GPU, GPUAllocation, GPUMetricsHistory, Host, Training
from gpufleet.db.session import session_scope


def _host_gpu(sess, name: str) -> tuple[Host, GPU]:
    host = Host(name=name)
    sess.add(host)
    sess.flush()
    gpu = GPU(host_id=host.id, index=0, vendor="nvidia", backend="cuda", name="H100")
    sess.add(gpu)
    sess.flush()
    return host, gpu


def _training(sess, gpu_ids: list[int]) -> Training:
    t = Training(name="t", owner="ada", recipe="sae", config={"max_steps": 1}, gpu_ids=gpu_ids)
    sess.add(t)
    sess.flush()
    return t


def test_training_defaults_follow_the_seed(db_settings) -> None:
    with session_scope(db_settings) as sess:
        t = _training(sess, [0, 1])
        tid = t.id
    with session_scope(db_settings) as sess:
        t = sess.get(Training, tid)
        assert t.gpu_ids == [0, 1]
        assert t.distributed is False
        assert t.world_size == 1
        assert t.status == "queued"
        assert t.created_at.tzinfo is not None


def test_two_active_exclusive_allocations_of_one_gpu_are_impossible(db_settings) -> None:
    with session_scope(db_settings) as sess:
        host, gpu = _host_gpu(sess, f"h-{uuid.uuid4().hex[:8]}")
        a, b = _training(sess, [0]), _training(sess, [0])
        sess.add(GPUAllocation(training_id=a.id, gpu_id=gpu.id, host_id=host.id, gpu_index=0, exclusive=True))
        sess.flush()
        ids = (host.id, gpu.id, b.id)
    with pytest.raises(IntegrityError):
        with session_scope(db_settings) as sess:
            sess.add(GPUAllocation(training_id=ids[2], gpu_id=ids[1], host_id=ids[0], gpu_index=0, exclusive=True))
    # Once released, the GPU can be held again.
    with session_scope(db_settings) as sess:
        alloc = sess.scalar(select(GPUAllocation).where(GPUAllocation.gpu_id == ids[1]))
        alloc.released_at = datetime.now(timezone.utc)
    with session_scope(db_settings) as sess:
        sess.add(GPUAllocation(training_id=ids[2], gpu_id=ids[1], host_id=ids[0], gpu_index=0, exclusive=True))


def test_one_sample_per_gpu_and_time(db_settings) -> None:
    host_id = uuid.uuid4()
    ts = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
    row = dict(host_id=host_id, gpu_index=0, timestamp=ts, utilization=1.0, memory_used=1, memory_total=2)
    with session_scope(db_settings) as sess:
        sess.add(GPUMetricsHistory(**row))
        # Another host's GPU 0 at the same time is a different sample.
        sess.add(GPUMetricsHistory(**{**row, "host_id": uuid.uuid4()}))
    with pytest.raises(IntegrityError):
        with session_scope(db_settings) as sess:
            sess.add(GPUMetricsHistory(**row))
    with session_scope(db_settings) as sess:
        got = sess.scalar(select(GPUMetricsHistory).where(GPUMetricsHistory.host_id == host_id))
        assert got.timestamp == ts


def test_naive_datetimes_are_refused(db_settings) -> None:
    with pytest.raises(Exception, match="timezone-aware"):
        with session_scope(db_settings) as sess:
            sess.add(Host(name=f"n-{uuid.uuid4().hex[:6]}", last_heartbeat=datetime(2026, 1, 1)))
