"""A sweep's trial waits at each rung's step for the sweep's verdict (torch-free).

With asynchronous early stopping a trial's training reports its metric at
every rung's step (``LaunchSpec.rung_steps``) and its ranks wait there before
the next step, until the sweep's driver has judged that value: let past (the
worker creates ``<progress file>.passed-<step>``: :func:`mark_passed`, which
the driver asks for through ``trainings.passed_rung_step``) or stopped (the
stop contract: SIGTERM, then the group is killed). A pruned trial so runs no
step past the rung that stops it, however late the driver decides on a loaded
machine; a promoted one waits about a second per rung. After ``WAIT_S`` with
no verdict it goes on, so a driver that is down never holds a GPU idle long.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any

# The longest a rank waits at a rung for the verdict before it goes on regardless.
WAIT_S = 300.0
POLL_S = 0.02


def passed_file(progress_file: str, step: int) -> str:
    return f"{progress_file}.passed-{step}"


def mark_passed(progress_file: str, step: int) -> None:
    """Let the ranks waiting at ``step`` go on (a marker, created without following a link)."""
    from gpufleet import memberfs

    memberfs.mark(passed_file(progress_file, step))


class RungGate:
    """A :class:`~gpufleet.engine.trainer.StepHook`: before the step after a rung's, wait for the verdict."""

    def __init__(self, progress_file: str, steps: Iterable[int], should_stop: Callable[[], bool],
                 wait_s: float = WAIT_S):
        self.progress_file, self.steps = progress_file, frozenset(steps)
        self.should_stop, self.wait_s = should_stop, wait_s
        self.waited: dict[int, float] = {}  # step -> seconds waited there

    def before_step(self, trainer: Any) -> None:
        step = trainer.step
        if step not in self.steps or step in self.waited:
            return
        began = time.monotonic()
        path = passed_file(self.progress_file, step)
        # A stop (the sweep pruned it, or anyone else's) ends the wait: the loop then stops as it does on any stop.
        while not os.path.exists(path) and not self.should_stop() and time.monotonic() - began < self.wait_s:
            time.sleep(POLL_S)
        self.waited[step] = time.monotonic() - began

    def after_compute(self, trainer: Any, seconds: float) -> None:
        pass


def gates(spec: Any, should_stop: Callable[[], bool]) -> list[RungGate]:
    """The gate a launch spec asks for: on one host only (the marker is a file of this host's run folder)."""
    if not spec.rung_steps or spec.gang:
        return []
    return [RungGate(spec.progress_file, spec.rung_steps, should_stop)]
