"""The worker's side of a sweep trial's rungs: let its waiting ranks past once the driver said so.

The ranks of a trial wait at each rung's step (engine/rungwait.py); the sweep's
driver judges the value reported there and, promoted, sets the training's
``passed_rung_step``, which the metrics sink reads back with every write (as it
reads a cancel). This creates the marker the ranks wait for. While the ranks
wait, the sink writes every ``WAITING_FLUSH_S`` instead of once a second, so the
driver sees the rung's value, and the ranks its verdict, soon.
"""

from __future__ import annotations

from pathlib import Path

from gpufleet.db.models import Training
from gpufleet.engine.rungwait import mark_passed

WAITING_FLUSH_S = 0.2


class RungRelease:
    def __init__(self, t: Training, progress: Path):
        self.progress = str(progress)
        self.passed = t.passed_rung_step or 0
        self.steps = sorted(s for s in t.rung_steps or [] if s > self.passed)

    def waiting(self, step: int | None) -> bool:
        """Whether the ranks wait at ``step``, the newest they reported, for a verdict not yet passed on."""
        return step is not None and step > self.passed and step in self.steps

    def flush_every(self, step: int | None, usual_s: float) -> float:
        return min(usual_s, WAITING_FLUSH_S) if self.waiting(step) else usual_s

    def let_past(self, passed: int | None) -> None:
        """The driver let the training past ``passed``: every rung up to it is open to the ranks."""
        if passed is None or passed <= self.passed:
            return
        for s in self.steps:
            if self.passed < s <= passed:
                mark_passed(self.progress, s)
        self.passed = passed
