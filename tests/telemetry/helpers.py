"""Small factories for telemetry tests."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from gpufleet.config import Settings
from gpufleet.db.models import Host
from gpufleet.db.session import session_scope
from gpufleet.telemetry.sample import GPUProcess, GPUSample


def make_host(settings: Settings, name: str | None = None) -> tuple[uuid.UUID, str]:
    name = name or f"host-{uuid.uuid4().hex[:8]}"
    with session_scope(settings) as sess:
        h = Host(name=name)
        sess.add(h)
        sess.flush()
        return h.id, name


def make_samples(host: str, start: datetime, *, gpus: int = 2, seconds: int = 10,
                 training: uuid.UUID | None = None) -> list[GPUSample]:
    out = []
    for t in range(seconds):
        for i in range(gpus):
            procs = []
            if training is not None and i == 0:
                procs.append(GPUProcess(pid=1000, user="alice", command="python", used_memory=1 << 30,
                                        training_id=training, job_type="training", foreign=False))
            out.append(GPUSample(
                host=host, index=i, timestamp=start + timedelta(seconds=t),
                utilization=float(10 * i + t), memory_used=(t + 1) * 1000, memory_total=80_000,
                temperature=40.0 + i, power_draw=100.0 + t, processes=procs,
            ))
    return out
