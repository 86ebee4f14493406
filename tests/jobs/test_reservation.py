"""A training's reservation against what NVML measures for its ranks (``jobs/peak_memory.py``).

A rank seen above its reservation is an event, once; a training that shares its
GPUs and holds well under its reservation in its steady state has the
reservation trimmed to its peak plus a margin, so other work fits beside it.
The worker's real metrics sink runs here against a real database, with a real
rank process; NVML is a test double with pynvml's functions that says what
that process holds (a GPU cannot exist here).
"""

from __future__ import annotations

import json
import math
import uuid
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

from sqlalchemy import select

from gpufleet.db.models import GPU, GPUAllocation, Host, Training, TrainingEvent
from gpufleet.db.session import session_scope
from gpufleet.db.types import utcnow
from gpufleet.jobs import peak_memory
from gpufleet.jobs.metrics_sink import MetricsSink

MiB, GiB = 2**20, 2**30


class _NVML:
    """pynvml's process listing for one GPU: the process ``pid`` holds ``used`` bytes."""

    def __init__(self, pid: int) -> None:
        self.pid, self.used = pid, 0

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=self.pid, usedGpuMemory=self.used)]


def _training(settings, *, exclusive: bool, reserved: int, declared: bool = False) -> tuple[uuid.UUID, str]:
    tid, worker, host = uuid.uuid4(), f"w-{uuid.uuid4().hex[:6]}", f"h-{uuid.uuid4().hex[:6]}"
    with session_scope(settings) as sess:
        h = Host(name=host)
        sess.add(h)
        sess.flush()
        g = GPU(host_id=h.id, index=0, vendor="nvidia", backend="cuda", name="NVIDIA H100 80GB HBM3",
                memory_total=80 * GiB)
        sess.add(g)
        # The estimate's own figure is reserved, unless the submitter gave one (``declared``).
        estimate = {"total": reserved + (GiB if declared else 0), "key": "mlp/x"}
        sess.add(Training(id=tid, name="packed", owner="o", recipe="mlp", config={}, status="running",
                          exclusive=exclusive, memory_estimate=reserved, estimate=estimate, lease_owner=worker,
                          lease_expires_at=utcnow() + timedelta(seconds=60)))
        sess.flush()
        sess.add(GPUAllocation(training_id=tid, gpu_id=g.id, host_id=h.id, gpu_index=0, exclusive=exclusive,
                               reserved_memory=reserved))
    return tid, worker + "|" + host


def _sink(settings, tid: uuid.UUID, who: str, progress: Path, nvml: _NVML, rank_pid: int) -> MetricsSink:
    worker, host = who.split("|")
    with session_scope(settings) as sess:
        row = sess.get(Training, tid)
    sink = MetricsSink(settings, row, worker, progress, host)
    sink.memory.watch_processes(nvml, [0], rank_pid)
    return sink


def _steps(progress: Path, first: int, last: int) -> None:
    with progress.open("a") as f:
        for s in range(first, last + 1):
            f.write(json.dumps({"type": "step", "step": s, "loss": 1.0}) + "\n")


def _pump(sink: MetricsSink, times: int) -> None:
    for _ in range(times):
        sink._last_flush = 0
        assert sink.pump() == "ok"


def _state(settings, tid: uuid.UUID) -> tuple[int, list[tuple[str, str, dict]]]:
    with session_scope(settings) as sess:
        reserved = sess.scalar(select(GPUAllocation.reserved_memory).where(GPUAllocation.training_id == tid))
        events = [(e.kind, e.reason, e.data) for e in sess.scalars(
            select(TrainingEvent).where(TrainingEvent.training_id == tid).order_by(TrainingEvent.seq))]
    return reserved, events


def test_a_shared_trainings_reservation_is_trimmed_in_its_steady_state_and_an_overrun_is_said(
        db_settings, tmp_path, standin_rank, monkeypatch) -> None:
    monkeypatch.setattr(peak_memory, "SAMPLE_EVERY_S", 0.0)
    tid, who = _training(db_settings, exclusive=False, reserved=8 * GiB)
    progress = tmp_path / "p.jsonl"
    progress.touch()
    nvml = _NVML(standin_rank.pid)
    sink = _sink(db_settings, tid, who, progress, nvml, standin_rank.pid)
    nvml.used = 2 * GiB
    _steps(progress, 1, 2)
    _pump(sink, 5)
    # Two steps: not yet the steady state, however many samples.
    assert _state(db_settings, tid)[0] == 8 * GiB
    _steps(progress, 3, 4)
    _pump(sink, 1)
    reserved, events = _state(db_settings, tid)
    assert reserved == math.ceil(2 * GiB * 1.1)
    (trimmed,) = [e for e in events if e[1].startswith("reservation trimmed")]
    assert trimmed[0] == "info" and "from 8.0 GiB to 2.2 GiB per GPU" in trimmed[1] and "at step 4" in trimmed[1]
    assert trimmed[2] == {"from": 8 * GiB, "to": reserved, "measured": 2 * GiB, "step": 4}
    # Later the rank grows past the trimmed reservation: said once, as a warning, and it counts next time.
    nvml.used = 3 * GiB
    _pump(sink, 3)
    reserved, events = _state(db_settings, tid)
    over = [e for e in events if e[0] == "warning"]
    assert len(over) == 1 and over[0][1].startswith("its process holds 3.0 GiB on its GPU, over the 2.2 GiB reserved")
    assert over[0][2] == {"rank": 0, "measured": 3 * GiB, "reserved": reserved}
    assert len([e for e in events if e[1].startswith("reservation trimmed")]) == 1  # trimmed once
    with session_scope(db_settings) as sess:
        assert sess.get(Training, tid).measured_peak_memory == 3 * GiB


def test_exclusive_declared_and_near_reservations_are_left_alone(db_settings, tmp_path, standin_rank,
                                                                 monkeypatch) -> None:
    monkeypatch.setattr(peak_memory, "SAMPLE_EVERY_S", 0.0)
    for exclusive, reserved, declared, used in ((True, 8 * GiB, False, 2 * GiB), (False, 8 * GiB, True, 2 * GiB),
                                                (False, 2 * GiB + 100 * MiB, False, 2 * GiB)):
        tid, who = _training(db_settings, exclusive=exclusive, reserved=reserved, declared=declared)
        progress = tmp_path / f"p-{tid}.jsonl"
        progress.touch()
        nvml = _NVML(standin_rank.pid)
        nvml.used = used
        sink = _sink(db_settings, tid, who, progress, nvml, standin_rank.pid)
        _steps(progress, 1, 10)
        _pump(sink, 6)
        got, events = _state(db_settings, tid)
        # An exclusive training holds its GPU whole; 8 GiB a person gave (a sweep's memory_mb) is theirs;
        # 2.1 GiB for 2.0 measured is within the margin.
        assert got == reserved and not [e for e in events if e[0] == "warning" or "trimmed" in e[1]], events
