"""Correct estimates by what trainings of the same recipe and shape measured.

Every training stores its estimate (``trainings.estimate``: ``total``, the
``context_bytes`` it counted and ``allocator_bytes``, the rest) and its
``estimate_key``. When it runs, the host's agent reads NVML's used memory for
each rank's process (``telemetry/procmem.py``): ``peak_memory_per_rank``, and
``measured_peak_memory`` = the largest. That is the same quantity the estimate's
total stands for, so what the latest runs with the same key held beyond their
context (the caching allocator's part, in bytes) replaces the next estimate's
allocator part, and a second run of a shape is estimated at what the first one
measured: "estimated 11.2 GiB, calibrated from 3 runs". Bytes, not the ratio of
measured to estimated: after an upgrade that estimates the shape better, a ratio
taken from the older estimate would correct the newer one by the older error.

The median of the runs, so one odd run (a rank that died early) does not swing
the figure; runs that measured nothing (CPU ranks report 0) are skipped, and so
are estimates stored before the context was part of them (their runs measured
the allocator's peak alone, another quantity).
"""

from __future__ import annotations

from statistics import median

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.db.models import Training
from gpufleet.scheduling.estimate import Calibration

# A measured / estimated total outside this band means the run measured
# something else (a crash at start, another process's memory); it is not used.
_SANE = (0.2, 5.0)


def measured_allocator(measured: int | None, estimate: dict | None) -> int | None:
    """What one run's process held beyond the context its estimate counted, or None when the
    run cannot be used."""
    est = estimate or {}
    if not measured or measured <= 0 or "context_bytes" not in est:
        return None
    total, context = int(est.get("total") or 0), int(est.get("context_bytes") or 0)
    allocator = int(est.get("allocator_bytes") or 0)
    if total <= 0 or allocator <= 0 or measured <= context:
        return None
    if not _SANE[0] <= measured / total <= _SANE[1]:
        return None
    return measured - context


def calibration_for(sess: Session, key: str | None, *, limit: int = 20) -> Calibration | None:
    """The correction for estimates with ``key``, from the latest ``limit`` measured runs."""
    if not key:
        return None
    rows = sess.execute(
        select(Training.measured_peak_memory, Training.estimate)
        .where(Training.estimate_key == key, Training.measured_peak_memory.is_not(None))
        .order_by(Training.created_at.desc())
        .limit(limit)
    ).all()
    held = [b for measured, est in rows if (b := measured_allocator(measured, est)) is not None]
    if not held:
        return None
    mid = median(held)
    # The margin kept: how far the highest run went above the median (none for one run).
    return Calibration(runs=len(held), allocator_bytes=int(mid), spread=max(0.0, max(held) / mid - 1))


def record_peak_memory(training: Training, per_rank: list[int]) -> None:
    """Store what the ranks measured; the next estimate with this key uses it."""
    training.peak_memory_per_rank = [int(x) for x in per_rank]
    positive = [int(x) for x in per_rank if x and x > 0]
    training.measured_peak_memory = max(positive) if positive else None
