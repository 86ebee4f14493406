"""Helpers for the quota, fair-share and usage tests: trainings that held GPUs for known times.

They write in ``write_session``s, so they may write into the SQLite file of a
running server (which writes samples every second) without "database is locked".
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import select

from gpufleet.config import Settings
from gpufleet.db.models import GPU, GPUAllocation, GPUMetricsRollup, Host, Training
from gpufleet.db.session import write_session


def make_host(settings: Settings, gpus: int = 4) -> uuid.UUID:
    """A host row with ``gpus`` GPUs (no worker: these trainings only need to have held them)."""
    with write_session(settings) as sess:
        host = Host(name="usage-" + uuid.uuid4().hex[:8], status="offline")
        sess.add(host)
        sess.flush()
        for i in range(gpus):
            sess.add(GPU(host_id=host.id, index=i, vendor="nvidia", backend="cuda", name="H100", simulated=True))
        return host.id


def held_training(settings: Settings, host_id: uuid.UUID, owner: str,
                  spans: list[tuple[int, datetime, datetime | None]], status: str = "succeeded") -> uuid.UUID:
    """A training of ``owner`` that held GPU ``index`` from ``start`` to ``end`` for each span."""
    with write_session(settings) as sess:
        t = Training(name="held", owner=owner, recipe="mlp", config={}, status=status)
        sess.add(t)
        sess.flush()
        gpu_ids = dict(sess.execute(select(GPU.index, GPU.id).where(GPU.host_id == host_id)).all())
        for index, start, end in spans:
            sess.add(GPUAllocation(training_id=t.id, gpu_id=gpu_ids[index], host_id=host_id, gpu_index=index,
                                   allocated_at=start, released_at=end))
        return t.id


def rollup_minutes(settings: Settings, host_id: uuid.UUID, index: int, minutes: list[datetime],
                   utilization: float) -> None:
    """One-minute rollups of a GPU at ``utilization`` percent."""
    with write_session(settings) as sess:
        for m in minutes:
            sess.add(GPUMetricsRollup(
                host_id=host_id, gpu_index=index, bucket=m, samples=60, utilization_min=utilization,
                utilization_avg=utilization, utilization_max=utilization, memory_used_min=0, memory_used_avg=0,
                memory_used_max=0, memory_total=1,
            ))
