"""Correct estimates by what trainings of the same recipe and shape measured.

Every training stores its estimate (``trainings.estimate``, with
``allocator_bytes``: what ``torch.cuda.max_memory_allocated`` should reach) and
its ``estimate_key``; when it runs, each rank reports its measured peak
(``peak_memory_per_rank``, ``measured_peak_memory`` = the largest). The ratio
measured / estimated of the latest runs with the same key corrects the next
estimate: "estimated 11.2 GiB, calibrated from 3 runs".

The median of the ratios, so one odd run (a rank that died early) does not
swing the figure; runs that measured nothing (CPU ranks report 0) are skipped.
"""

from __future__ import annotations

from statistics import median

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.db.models import Training
from gpufleet.scheduling.estimate import Calibration

# Ratios outside this band mean the run measured something else (a crash at
# start, another process on the GPU); they are not used.
_SANE = (0.2, 5.0)


def calibration_ratios(pairs: list[tuple[int, int]]) -> list[float]:
    """measured / estimated for (measured, estimated) pairs that are both positive and sane."""
    out = []
    for measured, estimated in pairs:
        if measured and estimated and measured > 0 and estimated > 0:
            r = measured / estimated
            if _SANE[0] <= r <= _SANE[1]:
                out.append(r)
    return out


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
    pairs = [
        (measured, int((est or {}).get("allocator_bytes") or 0))
        for measured, est in rows
    ]
    ratios = calibration_ratios(pairs)
    if not ratios:
        return None
    return Calibration(runs=len(ratios), ratio=median(ratios))


def record_peak_memory(training: Training, per_rank: list[int]) -> None:
    """Store what the ranks measured; the next estimate with this key uses it."""
    training.peak_memory_per_rank = [int(x) for x in per_rank]
    positive = [int(x) for x in per_rank if x and x > 0]
    training.measured_peak_memory = max(positive) if positive else None
